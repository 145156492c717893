"""train_and_evaluate(recipe, workdir): the MLM pretraining driver.

Resumes from the newest readable checkpoint in the workdir without being
told. The host reads each step's metrics one step late, so the device queue
stays full; a save, an evaluation or a log line first checks the step's own
metrics, so a NaN or Inf never reaches a checkpoint. SIGTERM saves and
returns normally (the CLI exits 0).
"""

from __future__ import annotations

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
from jaxbert.train import parallel, plan, sources
from jaxbert.model.heads import build_model
from jaxbert.train.checkpoint import Checkpoints
from jaxbert.devices import peak_flops
from jaxbert.model.flops import train_flops_per_token
from jaxbert.train.lock import workdir_lock
from jaxbert.train.metrics import MetricsWriter, MetricWindow
from jaxbert.train.optim import make_optimizer
from jaxbert.train.progress import Progress
from jaxbert.train.recipe import Recipe, RecipeError, save_effective
from jaxbert.train.step import summarize
from jaxbert.errors import Diverged
from jaxbert.data.loader import check_compatible
from jaxbert.data.tokenizer import load_tokenizer, special_token_ids, tokenizer_hash
from jaxbert.train import hosts, warmstart
from jaxbert.train.hosts import check_shared_workdir
from jaxbert.train.outputs import finish


class TrainingDiverged(Diverged):
    """The loss, a gradient or a param became NaN or Inf; the message names the step."""


def train_and_evaluate(recipe: Recipe, workdir: str | Path) -> dict:
    """Trains recipe.train.steps optimizer steps; returns a summary with the last metrics.

    The workdir is locked for the run: a second run on it is refused (WorkdirBusy).
    """
    if not jax.distributed.is_initialized():  # the caller may have joined a multi-host run already
        parallel.initialize_distributed(recipe.parallel)
    with workdir_lock(workdir, active=jax.process_index() == 0, log=lambda m: tqdm.write(str(m))):
        return _train_and_evaluate(recipe, workdir)


def _train_and_evaluate(recipe: Recipe, workdir: str | Path) -> dict:
    t0 = time.time()
    primary, workdir = jax.process_index() == 0, fs.as_path(workdir)
    log = (lambda msg: tqdm.write(str(msg))) if primary else (lambda msg: None)
    check_shared_workdir(workdir)
    data_dir, tok_dir, vocab = None, None, None
    if recipe.data.source == "prepared":
        if primary:
            sources.ensure_data(recipe, workdir, log)
        _barrier("data")
        data_dir, tok_dir = sources.ensure_data(recipe, workdir, log)
        tok = load_tokenizer(tok_dir)
        vocab = tok.get_vocab_size()
    cfg = recipe.bert_config(vocab)
    if data_dir is not None and cfg.is_roberta:  # its position ids count from the [PAD] id
        if cfg.pad_token_id != special_token_ids(tok)["pad"]:
            raise RecipeError(f"model.config.pad_token_id: {cfg.pad_token_id}, but the tokenizer's pad token "
                              f"is {special_token_ids(tok)['pad']}; a {cfg.model_type} model needs them equal")
    if data_dir is not None:  # a model, tokenizer and data that do not fit stop here, named
        check_compatible(data_dir, vocab_size=cfg.vocab_size, tokenizer_hash=tokenizer_hash(tok))
    runner = parallel.make_runner(recipe.parallel)
    if "auto" in (recipe.train.per_device_batch_size, recipe.model.remat_policy):
        recipe = plan.resolve_auto(recipe, cfg, runner.devices, log)
        if primary:
            save_effective(recipe, workdir)  # the effective recipe records the planned values
    model = build_model(recipe.model.model_class, cfg, recipe.model.options())
    total, tr = recipe.train.steps, recipe.train
    tx, schedule = make_optimizer(recipe.optim, total)
    init_rng, rng = jax.random.split(jax.random.PRNGKey(tr.seed))
    host_rng = np.asarray(rng)  # every process holds the same key: replicate it over the mesh
    rng = jax.make_array_from_callback(host_rng.shape, runner.replicated, lambda idx: host_rng[idx])
    dummy = jnp.zeros((1, recipe.data.seq_len), jnp.int32)
    runner.prepare(model, lambda: model.init_boxed(init_rng, dummy, dummy)["params"], tx, schedule,
                   tr.norm_metrics)
    log(f"{recipe.name}: {model.__class__.__name__} {cfg.num_hidden_layers}x{cfg.hidden_size}, vocab "
        f"{cfg.vocab_size}, T={recipe.data.seq_len}; {parallel.describe(runner)}; global batch "
        f"{parallel.global_batch_size(recipe, runner)} = {tr.per_device_batch_size} x {runner.num_devices} "
        f"device(s) x {tr.accum_steps} accumulation; workdir {workdir}")

    hosts.align("checkpoints")  # Orbax's first sync is a device collective: meet before it
    ckpt = Checkpoints(workdir, recipe.checkpoint.every_steps, recipe.checkpoint.keep,
                       recipe.checkpoint.async_save, log)
    rng_abstract = jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=runner.replicated)
    restored = (ckpt.restore_latest(_saved(runner.abstract, rng_abstract), recipe.to_dict())
                if ckpt.steps() else None)
    if primary:  # after the check above: a refused recipe does not replace the one the run was saved with
        save_effective(recipe, workdir)
    source = sources.make_source(recipe, data_dir, parallel.host_batch_size(recipe, runner),
                                 process_index=jax.process_index(), process_count=jax.process_count(),
                                 vocab_size=cfg.vocab_size)
    if restored is not None and restored[0] >= total:  # nothing left to train: say so, compile nothing
        ckpt.close()
        log(f"{workdir} is finished at step {restored[0]}; --workdir NEW for a fresh run "
            f"(or --set train.steps=N with N > {restored[0]} to train on)")
        return {"status": "already finished", "step": restored[0], "wall_s": round(time.time() - t0, 1),
                "train": {}, "eval": {}, "workdir": str(workdir), "tokenizer": tok_dir}
    if restored is not None:
        start, tree, meta = restored
        state = runner.from_saved(runner.abstract.replace(
            step=tree["step"], params=tree["params"], opt_state=tree["opt_state"]))
        rng = tree["rng"]
        source.restore(meta["loader"][jax.process_index()])
        log(f"resumed from {ckpt.directory / str(start)}")
        # Checkpoints from before model.dropout_impl existed drew their dropout bits with threefry.
        saved_dropout = (meta.get("recipe") or {}).get("model", {}).get("dropout_impl", "threefry")
        if saved_dropout != recipe.model.dropout_impl:
            log(f"note: steps up to {start} drew dropout bits with dropout_impl {saved_dropout}; this run goes on "
                f"with {recipe.model.dropout_impl} (--set model.dropout_impl={saved_dropout} keeps the old one)")
    else:
        start, state = 0, runner.create_state()
        if recipe.model.init_from:
            fresh = jax.device_get(runner.to_saved(state).params)
            loaded = warmstart.load_source_params(recipe.model.init_from, recipe.model.model_class)
            state = state.replace(params=runner.place_params(
                warmstart.merge(fresh, loaded, recipe.model.scan_layers, log)))

    train_fn = hosts.compiled_then_aligned(runner.compile_train(), "train")
    eval_fn = hosts.compiled_then_aligned(runner.compile_eval(model.apply), "eval")
    tokens_per_step = parallel.global_batch_size(recipe, runner) * recipe.data.seq_len
    m_frac = (recipe.data.max_predictions or round(recipe.data.seq_len * recipe.data.mask_rate)) / recipe.data.seq_len
    flops = train_flops_per_token(cfg, recipe.data.seq_len, m_frac)
    peak = peak_flops(jax.devices()[0].device_kind)
    writer = MetricsWriter(workdir, active=primary)
    stop = _SigtermFlag()
    window, last_eval, status, step = MetricWindow(), {}, "finished", start

    def eval_source():
        return sources.make_source(recipe, data_dir, parallel.host_batch_size(recipe, runner) // tr.accum_steps,
                                   split="validation", process_index=jax.process_index(),
                                   process_count=jax.process_count(), fixed_masking=True,
                                   vocab_size=cfg.vocab_size)

    eval_batches = tr.eval_batches or getattr(eval_source(), "steps_per_epoch", 1)
    progress = Progress(recipe.name, total, start, tr.eval_every, eval_batches, log, active=primary)

    def evaluate():
        sums = {}
        for _, host in zip(range(eval_batches), eval_source()):
            m = parallel.metrics_to_host(runner, eval_fn(runner.params_of(state), runner.shard_batch(host, eval=True)))
            sums = {k: sums.get(k, 0.0) + v for k, v in m.items()}
        return summarize(sums, "eval_") if sums else {}

    try:
        batches = _device_batches(source, runner, tr.accum_steps)
        pending = None
        while step < total:
            batch, loader_state = next(batches)
            state, metrics = train_fn(state, batch, rng)
            step += 1
            progress.step(step)
            if pending is not None:  # the previous step's metrics: ready by now
                window.add(pending[0], parallel.metrics_to_host(runner, pending[1]))
            pending = (step, metrics)
            eval_due = step == total or (tr.eval_every and step % tr.eval_every == 0)
            save_due = ckpt.due(step) or step == total
            preempted = stop.requested(step % tr.log_every == 0)
            if step % tr.log_every == 0 or eval_due or save_due or preempted:
                window.add(step, parallel.metrics_to_host(runner, metrics))
                pending = None
            if step % tr.log_every == 0 or step == total:
                scalars = window.flush(tokens_per_step, recipe.data.seq_len, flops, peak, runner.num_devices)
                scalars["elapsed_s"] = round(time.time() - t0, 1)
                writer.write(step, scalars)
                progress.log_step(step, scalars)
            if save_due or preempted:
                writer.flush()  # a URL workdir shows the metrics up to every checkpoint
                ckpt.save(step, _saved(runner.to_saved(state), rng), _meta(recipe, step, loader_state))
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
    summary = {"status": status, "step": step, "wall_s": round(time.time() - t0, 1),
               "train": window.last, "eval": last_eval, "workdir": str(workdir), "tokenizer": tok_dir}
    o = recipe.outputs
    if status == "finished" and (o.plot or o.export or o.fill_mask):
        params = runner.to_saved(state).params
        # FSDP shards live on several hosts: every process takes part in gathering them.
        params = (jax.device_get(params) if jax.process_count() == 1
                  else multihost_utils.process_allgather(params, tiled=True))
        if primary:
            finish(recipe, workdir, model, params, tok_dir, log)
    return summary


def _saved(state, rng) -> dict:
    """What a checkpoint holds as arrays; everything else goes in _meta's JSON."""
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state, "rng": rng}


def _meta(recipe: Recipe, step: int, loader_state) -> dict:
    return {"step": step, "loader": _allgather_json(loader_state), "recipe": recipe.to_dict()}


def _allgather_json(value) -> list:
    """Every process's JSON-able `value`, in process order."""
    if jax.process_count() == 1:
        return [json.loads(json.dumps(value, default=int))]
    data = np.frombuffer(json.dumps(value, default=int).encode(), np.uint8)
    n = int(np.max(multihost_utils.process_allgather(np.array([data.size]))))
    rows = multihost_utils.process_allgather(np.pad(data, (0, n - data.size), constant_values=32))
    return [json.loads(bytes(r).decode()) for r in np.asarray(rows).reshape(jax.process_count(), n)]


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"jaxbert-{name}")


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


class _SigtermFlag:
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
