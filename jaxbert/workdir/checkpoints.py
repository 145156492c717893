"""Orbax checkpoints of a workdir: saving and restoring a run's state (``Checkpoints``), and reading
a checkpoint's params and meta on the host without knowing their layout (``read_params``, ``newest_meta``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.workdir.layout import CHECKPOINTS, CORRUPT, META, STATE, WorkdirError


def _read_meta(root: Path, step: int) -> dict:
    return json.loads((root / str(step) / META / "metadata").read_text())


class CheckpointWriteError(InputError):
    """A checkpoint could not be written (disk full, file size limit, permissions)."""


class _OneLine(logging.Filter):
    """Orbax logs a failed background write with its traceback, then raises it to us, and
    we report it as one line: the log keeps the message and drops the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.exc_info:
            record.exc_info, record.exc_text = None, None
        return True


if not any(isinstance(f, _OneLine) for f in logging.getLogger("absl").filters):
    logging.getLogger("absl").addFilter(_OneLine())


class RecipeMismatch(InputError):
    """A readable checkpoint made with a recipe whose model or optimizer does not fit this one."""


def _key(k) -> str:
    """One step of a key path as a string: Orbax's saved metadata spells optax's namedtuples as
    dicts and tuples as lists, so GetAttrKey('mu') there is DictKey('mu') and a SequenceKey(1)
    of the state is DictKey/SequenceKey 1: compare the names, not the container types."""
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _layout(tree) -> dict:
    """{key path (strings): (shape, dtype)} of a tree's arrays."""
    return {tuple(_key(k) for k in path): (tuple(x.shape), np.dtype(x.dtype).name)
            for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _diff(a, b, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, value in a, value in b) where two nested dicts differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


class Checkpoints:
    def __init__(self, workdir: str | Path, every_steps: int, keep: int, async_save: bool = True,
                 log: Callable[[str], None] = print):
        self.directory = fs.as_path(workdir) / CHECKPOINTS  # Orbax writes a URL through TensorStore
        self.every_steps = every_steps
        self.log = log
        self._differs: list[str] = []  # key paths where the last step _fits looked at differs
        self.restored_meta: dict | None = None  # the meta of the checkpoint restore_latest returned
        self._options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self._mngr = self._open()

    def _open(self) -> ocp.CheckpointManager:
        return ocp.CheckpointManager(self.directory, options=self._options, item_names=(STATE, META))

    def steps(self) -> list[int]:
        return sorted(self._mngr.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def due(self, step: int) -> bool:
        return step % self.every_steps == 0

    def save(self, step: int, tree: dict, meta: dict) -> None:
        """Starts saving tree (arrays, see ``state_tree``) and meta (JSON, see ``checkpoint_meta``) as `step`;
        returns before the write ends. Every process must call it (the arrays may be sharded across hosts).
        """
        if step in self._mngr.all_steps():
            return  # already saved (e.g. a SIGTERM right after a periodic save)
        args = ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta))
        with self._writing():
            self._mngr.save(step, args=args, force=True)

    def restore_latest(self, abstract_tree, recipe: dict | None = None) -> tuple[int, dict, dict] | None:
        """(step, tree, meta) of the newest readable checkpoint, or None when there is none.

        abstract_tree: ShapeDtypeStructs with shardings, the layout to restore into.
        A checkpoint whose saved arrays do not fit that layout (key paths, shapes, dtypes:
        another model, or another optimizer, whose opt_state is another tree) was made with another
        recipe: RecipeMismatch names the fields that differ (from ``recipe``, the
        recipe as a dict), and every checkpoint stays where it is. Only a step that
        cannot be read is set aside as corrupt.
        """
        for step in reversed(self.steps()):
            if self._fits(step, abstract_tree) is False:
                raise RecipeMismatch(self._mismatch(step, recipe))
            args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_tree),
                                      meta=ocp.args.JsonRestore())
            try:
                restored = self._mngr.restore(step, args=args)
                self.restored_meta = dict(restored.meta)
                return step, restored.state, restored.meta
            except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
                reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                self._set_aside(step, reason)
        return None

    def _fits(self, step: int, abstract_tree) -> bool | None:
        """Whether the saved arrays have the key paths, shapes and dtypes of abstract_tree; None if
        the saved metadata cannot be read. Another optimizer (AdamW vs LAMB, clipping on or off)
        changes the key paths of opt_state: that is a recipe mismatch, not corruption."""
        try:
            with quiet_absl():
                saved = ocp.PyTreeCheckpointer().metadata(self.directory / str(step) / STATE).item_metadata.tree
            got = _layout(saved)
        except Exception:  # noqa: BLE001 - unreadable metadata: let the restore decide (corrupt)
            return None
        want = _layout(abstract_tree)
        self._differs = sorted("/".join(k) for k in set(got) ^ set(want) | {k for k in set(got) & set(want)
                                                                            if got[k] != want[k]})
        return got == want

    def _mismatch(self, step: int, recipe: dict | None) -> str:
        where = self.directory / str(step)
        try:
            saved = _read_meta(self.directory, step)["recipe"]
        except Exception:  # noqa: BLE001
            saved = None
        diffs = _diff(saved, recipe) if saved is not None and recipe is not None else []
        fields = "; ".join(f"{k}: {a!r} in the checkpoint, {b!r} now" for k, a, b in diffs[:8])
        arrays = self._differs
        what = (f"fields that differ: {fields}" if fields else "its arrays do not fit this model or optimizer"
                + (f" (e.g. {', '.join(arrays[:3])})" if arrays else ""))
        return (f"{where} was saved with another recipe and does not fit this one ({what}); the checkpoints "
                f"are kept. Resume with the recipe it was saved with, or train in a new --workdir")

    def _set_aside(self, step: int, reason: str) -> None:
        """Moves an unreadable step out of the manager's way, so that it is neither
        restored again nor blocks a later save of the same step number."""
        dst = self.directory.parent / CORRUPT / f"{step}-{int(time.time())}"
        self.log(f"checkpoint {self.directory / str(step)} is corrupt or incomplete ({reason}); "
                 f"moved to {dst}, trying the one before it")
        if jax.process_index() == 0:
            dst.parent.mkdir(parents=True, exist_ok=True)
            (self.directory / str(step)).rename(dst)  # on a bucket: a copy, then a delete
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"jaxbert-ckpt-aside-{step}")
        self._mngr.close()
        self._mngr = self._open()

    def wait(self) -> None:
        with self._writing():
            self._mngr.wait_until_finished()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._mngr.close()

    @contextlib.contextmanager
    def _writing(self):
        """A failed (background) write, e.g. a full disk, as one line naming the folder."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - orbax/tensorstore raise ValueError, OSError, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if len(first) > 300:  # keep the start (what) and the end (why: the OS error)
                first = f"{first[:120]} ... {first[-160:]}"
            raise CheckpointWriteError(
                f"{self.directory}: cannot write a checkpoint ({first}); make room or fix the folder and run "
                "again: the run resumes from its last complete checkpoint") from e


def _steps(root) -> list[int]:
    """Checkpoint steps under root, newest first. On a bucket (no rename) Orbax marks a finished
    step with commit_success.txt; a step without it is still being written."""
    steps = sorted((int(p.name) for p in root.glob("*") if p.name.isdigit()), reverse=True)
    if fs.is_url(root):
        steps = [s for s in steps if (root / str(s) / "commit_success.txt").exists()]
    return steps


READ_ATTEMPTS = 20  # re-listings when a running job's max_to_keep deletes the step being read


def read_params(workdir, step: int | None = None, log=print) -> tuple[dict, dict]:
    """(params as NumPy arrays, meta) from a workdir's newest readable (or given) checkpoint.

    Reads only the params, on the host, without knowing their layout in advance:
    enough for export, fill-mask and continued pretraining on any machine.

    A run may be writing checkpoints meanwhile, and deleting old ones (checkpoint.keep):
    a step that vanishes while it is read is not unreadable, it was replaced, so the
    steps are listed again and the newest one there now is read (a bounded number of
    times). Only a step that is still there and cannot be read is skipped as unreadable.
    """
    if not fs.as_path(workdir).exists():
        raise WorkdirError(f"{workdir}: does not exist")
    root = fs.as_path(workdir) / CHECKPOINTS
    kept = _steps(root) if root.exists() else []
    if not kept:
        raise WorkdirError(f"{root}: no checkpoint in it")
    if step is not None and step not in kept:
        raise WorkdirError(f"{root}: no checkpoint of step {step}; the steps kept: "
                           f"{', '.join(map(str, sorted(kept)))}")
    if step is not None:
        try:
            return _read_params_at(root, step)
        except Exception as e:  # noqa: BLE001
            raise WorkdirError(f"{root / str(step)}: unreadable checkpoint ({type(e).__name__}: {e})") from None
    bad: set[int] = set()
    last_error = None
    for _ in range(READ_ATTEMPTS):
        steps = [s for s in _steps(root) if s not in bad]
        if not steps:
            break
        s = steps[0]
        try:
            return _read_params_at(root, s)
        except Exception as e:  # noqa: BLE001 - vanished (re-list) or unreadable (the one before)
            last_error = e
            if s in _steps(root):
                bad.add(s)
                log(f"checkpoint {root / str(s)} is unreadable ({type(e).__name__}); trying the one before")
    if last_error is None and not bad:
        raise WorkdirError(f"{root}: no checkpoint in it")
    raise WorkdirError(f"{root}: no readable checkpoint ({type(last_error).__name__}: {last_error})")


def _read_params_at(root, s: int) -> tuple[dict, dict]:
    meta = _read_meta(root, s)
    reader = ocp.PyTreeCheckpointer()
    with quiet_absl():  # the item has no step-level metadata file; absl says so at WARNING
        tree = reader.metadata(root / str(s) / STATE).item_metadata.tree
    as_numpy = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree["params"])
    restored = reader.restore(root / str(s) / STATE, args=ocp.args.PyTreeRestore(
        item={"params": tree["params"]}, restore_args={"params": as_numpy}, partial_restore=True))
    return restored["params"], meta


@contextlib.contextmanager
def quiet_absl():
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def newest_meta(workdir: Path) -> tuple[int, dict]:
    """(step, meta) of the workdir's newest checkpoint whose meta reads; WorkdirError when none does."""
    root = workdir / CHECKPOINTS
    for step in _steps(root):
        try:
            return step, _read_meta(root, step)
        except (OSError, ValueError):
            continue
    raise WorkdirError(f"{root}: no checkpoint in it")
