"""One training run on a workdir, set up the same way for every task: pretraining and fine-tuning.

A ``Session`` owns what lives as long as the run: the checkpoint manager (opened when the
session starts) and the metrics writer (opened when training starts); both are closed when the
run ends, whichever way it ends. ``restore_or_initialise`` resumes from the newest readable
checkpoint or starts fresh, writing the recipe only once a checkpoint accepted it;
``train`` runs the engine's loop (jaxbert.engine.loop.run) over the task. What differs by task
comes in as arguments: its fresh state, what a checkpoint must agree on, how it records its
recipe, and the task itself (batches, objective, evaluation, cadence hooks).

The RNG convention, written once here: ``jax.random.PRNGKey(train.seed)`` is split in two; the
first key initialises the params (``init_key``), the second is the key of the training steps
(``steps_key``: dropout, folded with the step number), saved in every checkpoint and restored with it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import jax
import numpy as np

from jaxbert import workdir as workdir_lib
from jaxbert.engine import hosts
from jaxbert.engine import loop as engine_loop
from jaxbert.engine.metrics_log import MetricsWriter
from jaxbert.engine.optim import OptimSection, make_optimizer
from jaxbert.workdir import Checkpoints


def init_key(seed: int):
    """The key the params are initialised from (a fresh model or a fresh head)."""
    return jax.random.split(jax.random.PRNGKey(seed))[0]


def steps_key(seed: int):
    """The training steps' base key (dropout); a resumed run takes the checkpoint's copy of it."""
    return jax.random.split(jax.random.PRNGKey(seed))[1]


def prepare_runner(runner, model, optim: OptimSection, total_steps: int, seed: int, inputs: tuple,
                   norm_metrics: bool):
    """Prepares ``runner`` to train ``model`` with the recipe's optimizer over total_steps, params
    initialised from init_key(seed) on ``inputs`` (dummy batches of the model's input shape).
    Returns the learning-rate schedule (step -> lr)."""
    tx, schedule = make_optimizer(optim, total_steps)
    key = init_key(seed)
    # None: evaluation reads the params trained, with no copy (the optimizer does not override eval_params)
    eval_params = optim.eval_params if type(optim).eval_params is not OptimSection.eval_params else None
    runner.prepare(model, lambda: model.init_boxed(key, *inputs)["params"], tx, schedule, norm_metrics,
                   eval_params=eval_params)
    return schedule


def restore_latest(runner, ckpt: Checkpoints, seed: int, recipe: dict):
    """(the run's steps key, replicated over the runner's devices; the newest readable checkpoint as
    (step, arrays, meta), or None): the arrays restored straight into the runner's shardings."""
    host_rng = np.asarray(steps_key(seed))  # every process holds the same key: replicate it over the mesh
    rng = jax.make_array_from_callback(host_rng.shape, runner.replicated, lambda idx: host_rng[idx])
    rng_abstract = jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=runner.replicated)
    abstract = workdir_lib.state_tree(runner.abstract.step, runner.abstract.params, runner.abstract.opt_state,
                                      rng_abstract)
    return rng, (ckpt.restore_latest(abstract, recipe) if ckpt.steps() else None)


def state_from(runner, tree: dict):
    """A restored checkpoint's arrays as the runner's train state."""
    return runner.from_saved(runner.abstract.replace(step=tree["step"], params=tree["params"],
                                                     opt_state=tree["opt_state"]))


@dataclasses.dataclass
class Start:
    """Where a run starts: step 0 with a fresh state, or a checkpoint's step, state and key."""
    step: int
    state: object  # None when the checkpoint is at or past the run's last step
    rng: object
    meta: Optional[dict]  # the restored checkpoint's meta (jaxbert.workdir.checkpoint_meta); None when fresh


class Session:
    """The checkpoint manager and metrics writer of one run, opened and closed here.

    Use it as a context manager: leaving the block (a return, an error) closes both, letting
    the checkpoints already being written land first."""

    def __init__(self, workdir, checkpoint, log: Callable[[str], None], primary: bool):
        """checkpoint: the recipe's CheckpointSection (every_steps, keep, async_save)."""
        self.workdir, self.log, self.primary = workdir, log, primary
        hosts.align("orbax")  # Orbax's first sync is a device collective: meet before it
        self.ckpt = Checkpoints(workdir, checkpoint.every_steps, checkpoint.keep, checkpoint.async_save, log)
        self.writer: Optional[MetricsWriter] = None
        self._closing: list = []

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes what is open, the task's own resources first (a progress bar), then the checkpoint
        manager (it waits for the saves in flight), then the writer. Closing twice does nothing."""
        closing, self._closing = self._closing, []
        ckpt, self.ckpt = self.ckpt, None
        writer, self.writer = self.writer, None
        try:
            for close in closing:
                close()
            if ckpt is not None:
                ckpt.close()
        finally:
            if writer is not None:
                writer.close()

    def restore_or_initialise(self, runner, seed: int, recipe: dict, total: int, *, fresh: Callable[[], object],
                              save_recipe: Callable[[], None],
                              accept: Callable[[int, dict], None] = lambda step, meta: None) -> Start:
        """The newest readable checkpoint's step, state and key, or step 0 with fresh() and the seed's key.

        recipe: the run's recipe as a dict (a checkpoint that does not fit names the fields that differ).
        accept(step, meta): may refuse a checkpoint that is not this run's (raises), and restores the
        task's own position from its meta; save_recipe() runs only after that, so a refused run leaves
        the recipe the workdir was saved with. A checkpoint at or past ``total`` gives a Start
        without state: the run is finished.
        """
        rng, restored = restore_latest(runner, self.ckpt, seed, recipe)
        if restored is None:
            save_recipe()
            return Start(0, fresh(), rng, None)
        step, tree, meta = restored
        accept(step, meta)
        save_recipe()
        if step >= total:
            return Start(step, None, None, meta)
        self.log(f"resumed from {self.ckpt.directory / str(step)}")
        return Start(step, state_from(runner, tree), tree["rng"], meta)

    def train(self, task, runner, start: Start, stop_at: Optional[int] = None) -> engine_loop.Outcome:
        """Steps start.step+1 .. task.total on the engine's loop, metrics written to the workdir;
        closes the session when the loop returns or fails (``task.close`` first, when it has one)."""
        self.writer = MetricsWriter(self.workdir, active=self.primary, resume_from=start.step)
        if hasattr(task, "close"):
            self._closing.append(task.close)
        try:
            return engine_loop.run(task, runner, self.ckpt, self.writer, start.state, start.rng, start.step,
                                   self.log, stop_at=stop_at)
        finally:
            self.close()
