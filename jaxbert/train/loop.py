"""train_and_evaluate(recipe, workdir): the MLM pretraining driver.

Resumes from the newest readable checkpoint in the workdir without being
told. The host reads each step's metrics one step late, so the device queue
stays full; a save, an evaluation or a log line first checks the step's own
metrics, so a NaN or Inf never reaches a checkpoint. SIGTERM saves and
returns normally (the CLI exits 0).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from tqdm import tqdm

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.data.loader import DataCompatibilityError
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.devices import peak_flops
from jaxbert.errors import Diverged
from jaxbert.model.flops import train_flops_per_token
from jaxbert.model.heads import build_model
from jaxbert.train import hosts, parallel, plan, sources, warmstart
from jaxbert.train.hosts import check_shared_workdir
from jaxbert.train.lock import workdir_lock
from jaxbert.train.metrics import MetricsWriter, MetricWindow
from jaxbert.train.optim import make_optimizer
from jaxbert.train.outputs import finish
from jaxbert.train.progress import Progress
from jaxbert.train.recipe import Recipe, save_effective
from jaxbert.train.step import summarize
from jaxbert.workdir import Checkpoints


class TrainingDiverged(Diverged):
    """The loss, a gradient or a param became NaN or Inf; the message names the step."""


def train_and_evaluate(recipe: Recipe, workdir: str | Path) -> dict:
    """Trains recipe.train.steps optimizer steps; returns a summary with the last metrics.

    The workdir is locked for the run: a second run on it is refused (WorkdirBusy).
    """
    workdir_lib.check_placement(workdir)  # before anything is written there
    if not jax.distributed.is_initialized():  # the caller may have joined a multi-host run already
        parallel.initialize_distributed(recipe.parallel)
    with workdir_lock(workdir, active=jax.process_index() == 0, log=lambda m: tqdm.write(str(m))):
        return _train_and_evaluate(recipe, workdir)


@dataclasses.dataclass
class _Run:
    """What the phases of one run share: set up once, read by each phase."""
    recipe: Recipe
    workdir: Path
    cfg: object
    model: object
    runner: object
    data_dir: str | None
    tok_dir: str | None
    log: object
    primary: bool
    t0: float
    schedule: object  # step -> learning rate

    def make_source(self, split: str = "train"):
        """This process's batches of a split: train batches hold every micro-batch of a step."""
        r, rows = self.recipe, parallel.host_batch_size(self.recipe, self.runner)
        if split != "train":
            rows //= r.train.accum_steps
        return sources.make_source(r, self.data_dir, rows, split=split, process_index=jax.process_index(),
                                   process_count=jax.process_count(), fixed_masking=split != "train",
                                   vocab_size=self.cfg.vocab_size)


def _train_and_evaluate(recipe: Recipe, workdir: str | Path) -> dict:
    run = _set_up(recipe, workdir)
    hosts.align("orbax")  # Orbax's first sync is a device collective: meet before it
    c = run.recipe.checkpoint
    ckpt = Checkpoints(run.workdir, c.every_steps, c.keep, c.async_save, run.log)
    try:
        start, state, rng, source = _restore_or_initialise(run, ckpt)
    except BaseException:
        ckpt.close()
        raise
    if start >= run.recipe.train.steps:  # nothing left to train: say so, compile nothing
        ckpt.close()
        run.log(f"{run.workdir} is finished at step {start}; --workdir NEW for a fresh run "
                f"(or --set train.steps=N with N > {start} to train on)")
        return {"status": "already finished", "step": start, "wall_s": round(time.time() - run.t0, 1),
                "train": {}, "eval": {}, "workdir": str(run.workdir), "tokenizer": run.tok_dir}
    state, step, status, last, last_eval = _train(run, ckpt, state, rng, start, source)
    return _finish(run, state, step, status, last, last_eval)


def _set_up(recipe: Recipe, workdir) -> _Run:
    """Data and tokenizer, model config, runner (with 'auto' values planned), model and optimizer."""
    primary, workdir = jax.process_index() == 0, fs.as_path(workdir)
    log = (lambda msg: tqdm.write(str(msg))) if primary else (lambda msg: None)
    t0 = time.time()
    check_shared_workdir(workdir)
    data_dir, tok_dir, vocab = None, None, None
    if recipe.data.source == "prepared":
        if primary:
            sources.ensure_data(recipe, workdir, log)
        hosts.barrier("data")
        data_dir, tok_dir = sources.ensure_data(recipe, workdir, log)
        tok = load_tokenizer(tok_dir)
        vocab = tok.get_vocab_size()
    cfg = recipe.bert_config(vocab)
    if data_dir is not None:  # a model, tokenizer and data that do not fit stop here, named
        sources.check_fits(cfg, tok, data_dir)
    runner = parallel.make_runner(recipe.parallel)
    if "auto" in (recipe.train.per_device_batch_size, recipe.model.remat_policy):
        recipe = plan.resolve_auto(recipe, cfg, runner.devices, log)
    if data_dir is not None:  # every run evaluates at its end: refuse data without held-out rows before a step
        _check_held_out(recipe, runner, data_dir)
    model = build_model(recipe.model.model_class, cfg, recipe.model.options())
    tx, schedule = make_optimizer(recipe.optim, recipe.train.steps)
    dummy = jnp.zeros((1, recipe.data.seq_len), jnp.int32)
    init_rng = jax.random.split(jax.random.PRNGKey(recipe.train.seed))[0]
    runner.prepare(model, lambda: model.init_boxed(init_rng, dummy, dummy)["params"], tx, schedule,
                   recipe.train.norm_metrics)
    tr = recipe.train
    log(f"{recipe.name}: {model.__class__.__name__} {cfg.num_hidden_layers}x{cfg.hidden_size}, vocab "
        f"{cfg.vocab_size}, T={recipe.data.seq_len}; {runner.describe()}; global batch "
        f"{parallel.global_batch_size(recipe, runner)} = {tr.per_device_batch_size} x {runner.num_devices} "
        f"device(s) x {tr.accum_steps} accumulation; workdir {workdir}")
    return _Run(recipe, workdir, cfg, model, runner, data_dir, tok_dir, log, primary, t0, schedule)


def _check_held_out(recipe: Recipe, runner, data_dir: str) -> None:
    """The validation split holds at least one evaluation batch (the loader refuses fewer), named."""
    rows = parallel.host_batch_size(recipe, runner) // recipe.train.accum_steps
    try:
        sources.make_source(recipe, data_dir, rows, split="validation", process_index=jax.process_index(),
                            process_count=jax.process_count(), fixed_masking=True)
    except DataCompatibilityError as e:
        raise DataCompatibilityError(f"evaluation needs held-out rows: {e}; prepare {data_dir} with a larger "
                                     f"--validation-fraction (or data.validation_fraction)") from None


def _restore_or_initialise(run: _Run, ckpt: Checkpoints):
    """(start step, state, rng, train source): the newest readable checkpoint's, or a fresh start
    (warm-started from model.init_from when the recipe names one). The effective recipe is written
    once the checkpoints accepted it: a refused recipe does not replace the one the run was saved with."""
    recipe, runner = run.recipe, run.runner
    rng, restored = restore_latest(runner, ckpt, recipe.train.seed, recipe.to_dict())
    source = run.make_source("train")
    if restored is not None and restored[0] < recipe.train.steps:
        # The data position is global (sequences consumed by all processes together), the same in
        # every process's record: any process count, device count or batch size continues from it.
        # Refused here (another seed, other data) the recipe on disk stays the one the run was saved with.
        source.restore(restored[2]["loader"][0])
    if run.primary:
        save_effective(recipe, run.workdir)
    if restored is None:
        state = runner.create_state()
        if recipe.model.init_from:
            fresh = jax.device_get(runner.to_saved(state).params)
            loaded = warmstart.load_source_params(recipe.model.init_from, recipe.model.model_class)
            state = state.replace(params=runner.place_params(
                warmstart.merge(fresh, loaded, recipe.model.scan_layers, run.log)))
        return 0, state, rng, source
    start, tree, meta = restored
    if start >= recipe.train.steps:
        return start, None, None, source
    state = runner.from_saved(runner.abstract.replace(
        step=tree["step"], params=tree["params"], opt_state=tree["opt_state"]))
    run.log(f"resumed from {ckpt.directory / str(start)}")
    saved_dropout = (meta.get("recipe") or {}).get("model", {}).get("dropout_impl")
    if saved_dropout is not None and saved_dropout != recipe.model.dropout_impl:
        run.log(f"note: steps up to {start} drew dropout bits with dropout_impl {saved_dropout}; this run goes on "
                f"with {recipe.model.dropout_impl} (--set model.dropout_impl={saved_dropout} keeps the old one)")
    saved_steps = (meta.get("recipe") or {}).get("train", {}).get("steps")
    if saved_steps is not None and saved_steps != recipe.train.steps:
        run.log(f"note: the run was saved planning {saved_steps} steps and now trains to {recipe.train.steps}: the "
                f"learning-rate schedule follows the new step count (at step {start} it is "
                f"{float(run.schedule(start)):.3g})")
    return start, state, tree["rng"], source


def restore_latest(runner, ckpt: Checkpoints, seed: int, recipe: dict):
    """(the run's base rng key, replicated over the runner's devices; the newest readable checkpoint as
    (step, arrays, meta), or None): the arrays restored straight into the runner's shardings."""
    rng = jax.random.split(jax.random.PRNGKey(seed))[1]
    host_rng = np.asarray(rng)  # every process holds the same key: replicate it over the mesh
    rng = jax.make_array_from_callback(host_rng.shape, runner.replicated, lambda idx: host_rng[idx])
    rng_abstract = jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=runner.replicated)
    abstract = workdir_lib.state_tree(runner.abstract.step, runner.abstract.params, runner.abstract.opt_state,
                                      rng_abstract)
    return rng, (ckpt.restore_latest(abstract, recipe) if ckpt.steps() else None)


def _train(run: _Run, ckpt: Checkpoints, state, rng, start: int, source):
    """Steps start+1 .. train.steps: logs, evaluations and checkpoints as the recipe asks; SIGTERM saves
    and stops. Returns (state, step, status, last logged train metrics, last eval metrics)."""
    recipe, runner, tr, log = run.recipe, run.runner, run.recipe.train, run.log
    total = tr.steps
    train_fn = hosts.compiled_then_aligned(runner.compile_train(), "train")
    eval_fn = hosts.compiled_then_aligned(runner.compile_eval(run.model.apply), "eval")
    T = recipe.data.seq_len
    tokens_per_step = parallel.global_batch_size(recipe, runner) * T
    flops = train_flops_per_token(run.cfg, T, recipe.data.masked_slots() / T)
    peak = peak_flops(jax.devices()[0].device_kind)
    writer = MetricsWriter(run.workdir, active=run.primary)
    stop = SigtermFlag()
    window, last_eval, status, step = MetricWindow(), {}, "finished", start
    eval_batches = tr.eval_batches or getattr(run.make_source("validation"), "steps_per_epoch", 1)
    progress = Progress(recipe.name, total, start, tr.eval_every, eval_batches, log, active=run.primary)

    def evaluate():
        sums = {}
        for _, host in zip(range(eval_batches), run.make_source("validation")):
            m = runner.metrics_to_host(eval_fn(runner.params_of(state), runner.shard_batch(host, eval=True)))
            sums = {k: sums.get(k, 0.0) + v for k, v in m.items()}
        return summarize(sums, "eval_") if sums else {}

    try:
        log("compiling the train step (the first step waits for it) ...")
        batches = _device_batches(source, runner, tr.accum_steps)
        pending = None
        while step < total:
            batch, loader_state = next(batches)
            state, metrics = train_fn(state, batch, rng)
            step += 1
            progress.step(step)
            if pending is not None:  # the previous step's metrics: ready by now
                window.add(pending[0], runner.metrics_to_host(pending[1]))
            pending = (step, metrics)
            eval_due = step == total or (tr.eval_every and step % tr.eval_every == 0)
            save_due = ckpt.due(step) or step == total
            preempted = stop.requested(step % tr.log_every == 0)
            if step % tr.log_every == 0 or eval_due or save_due or preempted:
                window.add(step, runner.metrics_to_host(metrics))
                pending = None
            if step % tr.log_every == 0 or step == total:
                scalars = window.flush(tokens_per_step, T, flops, peak, runner.num_devices)
                scalars["elapsed_s"] = round(time.time() - run.t0, 1)
                writer.write(step, scalars)
                progress.log_step(step, scalars)
            if save_due or preempted:
                writer.flush()  # a URL workdir shows the metrics up to every checkpoint
                meta = workdir_lib.checkpoint_meta(step, hosts.allgather_json(loader_state), recipe.to_dict(), run.cfg,
                                                   recipe.model.model_class)
                ckpt.save(step, workdir_lib.state_tree(*_saved_parts(runner.to_saved(state)), rng), meta)
            if eval_due:
                t_eval = time.time()
                last_eval = evaluate()
                window.t = time.time()  # evaluation time is not training throughput
                writer.write(step, last_eval)
                progress.evaluated(step, window.t - t_eval, last_eval)
            if preempted:
                status = "preempted"
                log(f"SIGTERM: saved step {step} to {ckpt.directory}; exiting")
                break
    except Diverged as e:  # MetricWindow.add or a non-finite param
        ckpt.wait()  # the saves already started hold good states: let them land
        good = ckpt.latest_step()
        where = (f"the last good checkpoint, step {good} in {ckpt.directory}, is intact" if good is not None
                 else "no checkpoint was written")
        raise TrainingDiverged(f"{e}; {where}") from None
    finally:
        progress.close()
        ckpt.close()
        writer.close()
        stop.restore()
    if status == "finished" and not last_eval:  # resumed at the end: report the held-out figures anyway
        last_eval = evaluate()
    return state, step, status, window.last, last_eval


def _finish(run: _Run, state, step: int, status: str, last: dict, last_eval: dict) -> dict:
    """The run's summary; a finished run also writes the recipe's outputs (plot, export, fill-mask)."""
    summary = {"status": status, "step": step, "wall_s": round(time.time() - run.t0, 1),
               "train": last, "eval": last_eval, "workdir": str(run.workdir), "tokenizer": run.tok_dir}
    o = run.recipe.outputs
    if status == "finished" and (o.plot or o.export or o.fill_mask):
        params = run.runner.to_saved(state).params
        # FSDP shards live on several hosts: every process takes part in gathering them.
        params = (jax.device_get(params) if jax.process_count() == 1
                  else multihost_utils.process_allgather(params, tiled=True))
        if run.primary:
            finish(run.recipe, run.workdir, run.model, params, run.tok_dir, run.log)
    return summary


def _saved_parts(state) -> tuple:
    return state.step, state.params, state.opt_state


def _device_batches(source, runner, accum: int):
    """(device batch [A, B, ...], loader state after it) pairs, one transfer ahead of the step."""
    def host():
        for b in source:
            yield {k: v.reshape(accum, v.shape[0] // accum, *v.shape[1:]) for k, v in b.items()}, source.state()
    it = host()
    nxt = None
    while True:
        if nxt is None:
            b, s = next(it)
            nxt = (runner.shard_batch(b), s)
        cur = nxt
        b, s = next(it)
        nxt = (runner.shard_batch(b), s)  # starts the next copy while the step runs
        yield cur


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
