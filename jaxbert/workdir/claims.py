"""Claiming a folder for a run: a workdir's kind (pretraining or fine-tuning, its marker file), the
claim a run makes before it writes (refusing folders jaxbert did not make, or of the other kind) and
undoes when it is refused before writing anything, and the refusal of a workdir inside a published output.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.fs import atomic_write_text
from jaxbert.workdir.checkpoints import newest_meta
from jaxbert.workdir.layout import FINETUNING, KIND_FILE, LOCK, PRETRAINING, WorkdirError, is_workdir
from jaxbert.workdir.meta import task_record


def kind(path) -> str | None:
    """PRETRAINING or FINETUNING for a jaxbert workdir (its KIND_FILE; a workdir of an older jaxbert,
    without one, by its newest checkpoint's meta), None for any other folder."""
    p = fs.as_path(path)
    try:
        found = json.loads((p / KIND_FILE).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        found = None
    if found in (PRETRAINING, FINETUNING):
        return found
    if not is_workdir(p):
        return None
    try:
        return FINETUNING if task_record(newest_meta(p)[1]) else PRETRAINING
    except InputError:  # no readable checkpoint
        return PRETRAINING


def claim(workdir, what: str) -> None:
    """Before a run writes anything: the folder is new, empty, or jaxbert's workdir of this kind; it
    is then marked as one (KIND_FILE). A folder holding what jaxbert did not make (a user's own
    recipe.yaml, notes, models) is not a workdir jaxbert may write into: WorkdirError naming it."""
    p = fs.as_path(workdir)
    if p.exists() and not p.is_dir():
        raise WorkdirError(f"--workdir {p}: is a file; a workdir is a folder")
    found = kind(p)
    if found is None and p.exists():
        others = sorted(e.name for e in p.iterdir() if e.name != LOCK)
        if others:
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            raise WorkdirError(f"--workdir {p}: holds {shown}, which jaxbert did not write (it is no jaxbert "
                               f"workdir: no {KIND_FILE}); choose a new or empty folder")
    elif found is not None and found != what:
        raise WorkdirError(f"--workdir {p}: is a {found} workdir; a {what} run goes in a folder of its own")
    p.mkdir(parents=True, exist_ok=True)
    if not (p / KIND_FILE).exists():
        atomic_write_text(p / KIND_FILE, json.dumps({"kind": what}) + "\n")


@contextlib.contextmanager
def claimed(workdir, what: str, active: bool = True):
    """``claim`` for the block of a run. A run refused before it wrote anything (an exception while the
    folder it claimed afresh holds only the kind marker and a released lock) leaves nothing behind:
    the marker, the lock file and the folders the claim created are removed. active: False in the
    processes that do not write (multi-host)."""
    if not active or fs.is_url(workdir):  # a bucket path: nothing to undo that a refusal leaves behind
        if active:
            claim(workdir, what)
        yield
        return
    p = Path(workdir)
    made = []  # the folders the claim creates, deepest first
    q = p.absolute()
    while not q.exists():
        made.append(q)
        q = q.parent
    fresh = not (p / KIND_FILE).exists()
    claim(workdir, what)
    try:
        yield
    except BaseException:
        if fresh:
            _unclaim(p, made)
        raise


def _unclaim(p: Path, made: list[Path]) -> None:
    """Removes what ``claim`` and the lock wrote in p, and the folders in made, when nothing else is there."""
    try:
        entries = {e.name for e in p.iterdir()}
        lock = p / LOCK
        if not entries <= {KIND_FILE, LOCK} or (lock.exists() and lock.stat().st_size):
            return  # the run wrote something, or a lock is held: all stays
        for name in entries:
            (p / name).unlink()
        for folder in made:
            folder.rmdir()
    except OSError:
        pass  # a folder something else wrote into meanwhile stays


def check_placement(workdir) -> None:
    """WorkdirError when a training workdir would lie in a folder that jaxbert published (prepared
    data, a model, a tokenizer): replacing that output (--overwrite) would take the run with it."""
    found = fs.enclosing_output(workdir)
    if found is not None:
        folder, kind = found
        where = "is" if os.fspath(folder) == os.fspath(fs.as_path(workdir)) else "is inside"
        raise WorkdirError(f"workdir {fs.as_path(workdir)} {where} {folder}, a jaxbert {kind} output (its "
                           f"{fs.MARKER}); a training workdir goes in a folder of its own: choose another --workdir")
