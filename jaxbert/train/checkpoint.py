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
        self._mngr.save(step, args=args, force=True)

    def restore_latest(self, abstract_tree) -> tuple[int, dict, dict] | None:
        """(step, tree, meta) of the newest readable checkpoint, or None when there is none.

        abstract_tree: ShapeDtypeStructs with shardings, the layout to restore into.
        """
        for step in reversed(self.steps()):
            args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_tree),
                                      meta=ocp.args.JsonRestore())
            try:
                restored = self._mngr.restore(step, args=args)
                return step, restored.state, restored.meta
            except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
                reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                self._set_aside(step, reason)
        return None

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
        self._mngr.wait_until_finished()

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()


def restore_params(workdir: str | Path, step: int | None = None):
    """(params as NumPy arrays, meta) from a workdir's newest readable (or given) checkpoint.

    Reads only the params, on the host, without knowing their layout in advance:
    enough for export, fill-mask and continued pretraining on any machine.
    """
    root = fs.as_path(workdir) / "checkpoints"
    steps = [step] if step is not None else sorted(
        (int(p.name) for p in root.glob("*") if p.name.isdigit()), reverse=True)
    if step is None and fs.is_url(root):  # no rename on a bucket: Orbax marks a finished step instead
        steps = [s for s in steps if (root / str(s) / "commit_success.txt").exists()]
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {root}")
    last_error = None
    for s in steps:
        try:
            meta = json.loads((root / str(s) / "meta" / "metadata").read_text())
            reader = ocp.PyTreeCheckpointer()
            with _quiet_absl():  # the item has no step-level metadata file; absl says so at WARNING
                tree = reader.metadata(root / str(s) / "state").item_metadata.tree
            as_numpy = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree["params"])
            restored = reader.restore(root / str(s) / "state", args=ocp.args.PyTreeRestore(
                item={"params": tree["params"]}, restore_args={"params": as_numpy}, partial_restore=True))
            return restored["params"], meta
        except Exception as e:  # noqa: BLE001 - try the one before
            last_error = e
            print(f"checkpoint {root / str(s)} is unreadable ({type(e).__name__}); trying the one before")
    raise RuntimeError(f"no readable checkpoint in {root}: {last_error}")


@contextlib.contextmanager
def _quiet_absl():
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
