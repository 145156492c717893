"""The one training loop: steps with metrics read one step late (jaxbert.engine.session sets it up).

``run(task, ...)`` drives any ``Task`` (jaxbert.engine.task): MLM pretraining and every
fine-tuning kind run through it. The host reads each step's metrics one step late, so the
device queue stays full; a log line, an evaluation, a save or a stop first checks the step's
own metrics, so a NaN or Inf never reaches a checkpoint (``TrainingDiverged``, naming the
step and the last good checkpoint). SIGTERM (preemption) saves and stops; multi-host runs
agree on it at log steps. Each new batch shape compiles once (buckets), and in a multi-host
run the processes meet after each compile.
"""

from __future__ import annotations

import dataclasses
import signal
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxbert import workdir as workdir_lib
from jaxbert.engine import hosts
from jaxbert.engine.metrics_log import MetricWindow
from jaxbert.engine.step import make_eval_step, make_train_step
from jaxbert.errors import Diverged


class TrainingDiverged(Diverged):
    """The loss, a gradient or a param became NaN or Inf; the message names the step."""


def host_params(runner, state):
    """The params export reads, on the host, whole (the optimizer's eval_params, as evaluation reads them:
    runner.params_of): FSDP shards on several hosts are gathered by every process."""
    params = runner.params_of(state, saved=True)
    return jax.device_get(params) if jax.process_count() == 1 else multihost_utils.process_allgather(params, tiled=True)


@dataclasses.dataclass
class Outcome:
    state: object
    step: int
    status: str  # finished | preempted (SIGTERM) | stopped (stop_at)


def run(task, runner, ckpt, writer, state, rng, start: int, log, stop_at: int | None = None) -> Outcome:
    """Steps start+1 .. task.total: logs, evaluations and checkpoints as the task asks; SIGTERM (or
    step == stop_at) saves and stops. ckpt and writer are the caller's to close."""
    total, every = task.total, task.log_every
    own = getattr(task, "train_step", None)  # a task with a step of its own (the embedding kind's GradCache)
    train_fn = per_shape(runner.compile_train(own or make_train_step(task.step)), "train")
    stop = SigtermFlag()
    carried = workdir_lib.metric_window(ckpt.restored_meta) if start else None
    window, status, step = MetricWindow(task.summarize, carried), "finished", start
    try:
        log("compiling the train step (the first step waits for it) ...")
        batches = device_batches(task.batches(start), runner)
        pending = None
        while step < total:
            batch, loader_state = next(batches)
            state, metrics = train_fn(state, batch, rng)
            step += 1
            task.stepped(step)
            if pending is not None:  # the previous step's metrics: ready by now
                window.add(pending[0], runner.metrics_to_host(pending[1]))
            pending = (step, metrics)
            log_due = step % every == 0 or step == total
            eval_due = step == total or task.eval_due(step)
            save_due = ckpt.due(step) or step == total
            preempted = stop.requested(step % every == 0)
            stopping = preempted or step == stop_at
            if log_due or eval_due or save_due or stopping:
                window.add(step, runner.metrics_to_host(metrics))
                pending = None
            if log_due:
                scalars = window.flush(task.throughput(), runner.num_devices)
                task.logged(step, scalars)
                writer.write(step, scalars)
            if eval_due:
                t_eval = time.time()
                figures = task.evaluate(state)
                window.t = time.time()  # evaluation time is not training throughput
                writer.write(step, figures)
                task.evaluated(step, state, figures, window.t - t_eval)
            if save_due or stopping:
                writer.flush()  # a URL workdir shows the metrics up to every checkpoint
                saved = runner.to_saved(state)
                ckpt.save(step, workdir_lib.state_tree(saved.step, saved.params, saved.opt_state, rng),
                          workdir_lib.with_metric_window(task.checkpoint_meta(step, loader_state), window.carry()))
            if stopping and step < total:
                status = "preempted" if preempted else "stopped"
                log(f"SIGTERM: saved step {step} to {ckpt.directory}; exiting" if preempted else
                    f"stopped: saved step {step} to {ckpt.directory}; run again to resume")
                break
    except Diverged as e:  # MetricWindow.add or a non-finite param
        ckpt.wait()  # the saves already started hold good states: let them land
        good = ckpt.latest_step()
        where = (f"the last good checkpoint, step {good} in {ckpt.directory}, is intact" if good is not None
                 else "no checkpoint was written")
        raise TrainingDiverged(f"{e}; {where}") from None
    finally:
        stop.restore()
    return Outcome(state, step, status)


def compile_eval(task, runner, outputs=None):
    """The task's eval step, compiled by the runner once per batch shape."""
    return per_shape(runner.compile_eval(task.apply_fn, make_eval_step(task.step, outputs)), "eval")


def device_batches(source, runner):
    """(device batch [A, B, ...], loader state after it) pairs from host ones, one transfer ahead of the step."""
    nxt = None
    while True:
        if nxt is None:
            b, s = next(source)
            nxt = (runner.shard_batch(b), s)
        cur = nxt
        b, s = next(source)
        nxt = (runner.shard_batch(b), s)  # starts the next copy while the step runs
        yield cur


def per_shape(fn, name: str):
    """fn; in a multi-host run each new batch shape is compiled ahead and the processes meet
    after it (hosts.compiled_then_aligned, once per shape)."""
    if jax.process_count() == 1:
        return fn
    compiled = {}

    def call(*args):
        key = tuple(tuple(x.shape) for x in jax.tree_util.tree_leaves(args[1]))
        if key not in compiled:
            compiled[key] = hosts.compiled_then_aligned(fn, f"{name}-{len(compiled)}")
        return compiled[key](*args)
    return call


class SigtermFlag:
    """SIGTERM (preemption) sets a flag the loop polls; multi-host runs agree at log steps."""

    def __init__(self):
        self.flag = False
        self._old = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.flag = True

    def requested(self, sync_point: bool) -> bool:
        if jax.process_count() == 1:
            return self.flag
        if not sync_point:
            return False
        return bool(np.any(multihost_utils.process_allgather(np.array([self.flag]))))

    def restore(self):
        signal.signal(signal.SIGTERM, self._old)
