"""Checkpoints: one Orbax CheckpointManager in WORKDIR/checkpoints.

A checkpoint holds the train state (params, optimizer state, step), the base
RNG key, and as JSON the data-loader state of every process and the recipe.
Orbax writes each step into a temporary directory and renames it when
complete (atomic), in the background (async). Restoring takes the newest step
that reads back; an unreadable one is moved to WORKDIR/checkpoints.corrupt
with a message, and the one before it is tried.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Callable

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from jaxbert import fs
from jaxbert.convert.workdir import _quiet_absl
from jaxbert.errors import InputError


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


def _signature(tree) -> list:
    """Sorted (shape, dtype) of a tree's arrays: comparable across container types and key spellings."""
    return sorted((tuple(x.shape), np.dtype(x.dtype).name) for x in jax.tree_util.tree_leaves(tree))


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
        self.directory = fs.as_path(workdir) / "checkpoints"  # Orbax writes a URL through TensorStore
        self.every_steps = every_steps
        self.log = log
        self._options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self._mngr = self._open()

    def _open(self) -> ocp.CheckpointManager:
        return ocp.CheckpointManager(self.directory, options=self._options, item_names=("state", "meta"))

    def steps(self) -> list[int]:
        return sorted(self._mngr.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def due(self, step: int) -> bool:
        return step % self.every_steps == 0

    def save(self, step: int, tree: dict, meta: dict) -> None:
        """Starts saving tree (arrays) and meta (JSON) as `step`; returns before the write ends.

        Every process must call it (the arrays may be sharded across hosts).
        """
        if step in self._mngr.all_steps():
            return  # already saved (e.g. a SIGTERM right after a periodic save)
        args = ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta))
        with self._writing():
            self._mngr.save(step, args=args, force=True)

    def restore_latest(self, abstract_tree, recipe: dict | None = None) -> tuple[int, dict, dict] | None:
        """(step, tree, meta) of the newest readable checkpoint, or None when there is none.

        abstract_tree: ShapeDtypeStructs with shardings, the layout to restore into.
        A checkpoint whose saved arrays do not fit that layout was made with another
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
                return step, restored.state, restored.meta
            except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
                reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                self._set_aside(step, reason)
        return None

    def _fits(self, step: int, abstract_tree) -> bool | None:
        """Whether the saved arrays have the shapes and dtypes of abstract_tree; None if unreadable."""
        try:
            with _quiet_absl():
                saved = ocp.PyTreeCheckpointer().metadata(self.directory / str(step) / "state").item_metadata.tree
            got = _signature(saved)
        except Exception:  # noqa: BLE001 - unreadable metadata: let the restore decide (corrupt)
            return None
        return got == _signature(abstract_tree)

    def _mismatch(self, step: int, recipe: dict | None) -> str:
        where = self.directory / str(step)
        try:
            saved = json.loads((where / "meta" / "metadata").read_text())["recipe"]
        except Exception:  # noqa: BLE001
            saved = None
        diffs = _diff(saved, recipe) if saved is not None and recipe is not None else []
        fields = "; ".join(f"{k}: {a!r} in the checkpoint, {b!r} now" for k, a, b in diffs[:8])
        what = f"fields that differ: {fields}" if fields else "its arrays do not fit this model"
        return (f"{where} was saved with another recipe and does not fit this one ({what}); the checkpoints "
                f"are kept. Resume with the recipe it was saved with, or train in a new --workdir")

    def _set_aside(self, step: int, reason: str) -> None:
        """Moves an unreadable step out of the manager's way, so that it is neither
        restored again nor blocks a later save of the same step number."""
        dst = self.directory.parent / "checkpoints.corrupt" / f"{step}-{int(time.time())}"
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

