"""train_and_evaluate(recipe, workdir): MLM pretraining, as a task on the engine (jaxbert.engine.loop).

Sets up the data, tokenizer, model and runner; resumes from the newest readable
checkpoint in the workdir without being told (the loader continues from the recorded
position, at any batch size or device count); the engine runs the steps, reading each
step's metrics one step late; a finished run writes the recipe's outputs. SIGTERM saves
and returns normally (the CLI exits 0).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.data.loader import DataCompatibilityError
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.devices import peak_flops
from jaxbert.engine import hosts, parallel
from jaxbert.engine import loop as engine
from jaxbert.engine.hosts import check_shared_workdir
from jaxbert.engine.lock import workdir_lock
from jaxbert.engine.progress import Progress
from jaxbert.engine.session import Session, Start, prepare_runner
from jaxbert.model.families import family_of
from jaxbert.model.flops import train_flops_per_token
from jaxbert.model.classes import build_model
from jaxbert.train import rtd_loop, rtd_warmstart, sources, warmstart
from jaxbert.train.batch_warmup import BatchWarmup
from jaxbert.train.mlm import MLM, summarize
from jaxbert.train.outputs import finish
from jaxbert.train.recipe import Recipe, RecipeError, save_effective

# plan_auto(recipe, cfg, devices, log) -> the recipe with its 'auto' keys planned
# (jaxbert.plan.batch_search.resolve_auto: the planner compiles this package's train step, so it sits above
# train/ and is handed in, not imported).
PlanAuto = Callable[[Recipe, object, list, Callable], Recipe]


def train_and_evaluate(recipe: Recipe, workdir: str | Path, stop_at: int | None = None,
                       plan_auto: PlanAuto | None = None) -> dict:
    """Trains recipe.train.steps optimizer steps; returns a summary with the last metrics.

    stop_at: save and stop after this step, as a SIGTERM would (status "stopped"; a later run
    resumes on the same schedule). The workdir is locked for the run: a second run on it is
    refused (WorkdirBusy). plan_auto: plans a recipe's `auto` batch size and remat policy for the
    run's devices (`jaxbert train` passes jaxbert.plan.batch_search.resolve_auto); a recipe with
    an `auto` key and no planner is refused before anything is written.
    """
    if plan_auto is None and "auto" in (recipe.train.per_device_batch_size, recipe.model.remat_policy):
        raise RecipeError("train.per_device_batch_size / model.remat_policy 'auto' need the planner: pass "
                          "plan_auto=jaxbert.plan.batch_search.resolve_auto (jaxbert train does)")
    sources.check_data(recipe, workdir)  # a mixture's folders and resume: refused by name before anything is written
    workdir_lib.check_placement(workdir)  # before anything is written there
    if not jax.distributed.is_initialized():  # the caller may have joined a multi-host run already
        parallel.initialize_distributed(recipe.parallel)
    primary = jax.process_index() == 0
    with workdir_lib.claimed(workdir, workdir_lib.PRETRAINING, active=primary), \
            workdir_lock(workdir, active=primary, log=lambda m: tqdm.write(str(m))):
        return _train_and_evaluate(recipe, workdir, stop_at, plan_auto)


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
    warmup: BatchWarmup | None = None  # batch-size warmup (train.batch_warmup_start), None when off

    def make_source(self, split: str = "train"):
        """This process's batches of a split: train batches hold every micro-batch of a step."""
        r, rows = self.recipe, parallel.host_batch_size(self.recipe, self.runner)
        if split != "train" or r.train.batch_warmup_start is not None:  # warmup: read micro-batch by micro-batch
            rows //= r.train.accum_steps
        return sources.make_source(r, self.data_dir, rows, split=split, process_index=jax.process_index(),
                                   process_count=jax.process_count(), fixed_masking=split != "train",
                                   vocab_size=self.cfg.vocab_size)


def _train_and_evaluate(recipe: Recipe, workdir: str | Path, stop_at: int | None, plan_auto: PlanAuto | None) -> dict:
    run = _set_up(recipe, workdir, plan_auto)
    with Session(run.workdir, run.recipe.checkpoint, run.log, run.primary) as session:
        start, source = _restore_or_initialise(run, session)
        if start.step >= run.recipe.train.steps:  # nothing left to train: say so, compile nothing
            run.log(f"{run.workdir} is finished at step {start.step}; --workdir NEW for a fresh run "
                    f"(or --set train.steps=N with N > {start.step} to train on)")
            return {"status": "already finished", "step": start.step, "wall_s": round(time.time() - run.t0, 1),
                    "train": {}, "eval": {}, "workdir": str(run.workdir), "tokenizer": run.tok_dir}
        state, step, status, last, last_eval = _train(run, session, start, source, stop_at)
    return _finish(run, state, step, status, last, last_eval)


def _set_up(recipe: Recipe, workdir, plan_auto: PlanAuto | None) -> _Run:
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
    cfg = recipe.model_config(vocab)
    if data_dir is not None:  # a model, tokenizer and data that do not fit stop here, named
        sources.check_fits(cfg, tok, data_dir, recipe.data.packing)
        if recipe.model.init_from:  # continued pretraining: data tokenized as the source model was trained
            warmstart.check_tokenizer(recipe.model.init_from, tok, data_dir)
    runner = parallel.make_runner(recipe.parallel)
    if "auto" in (recipe.train.per_device_batch_size, recipe.model.remat_policy):
        recipe = plan_auto(recipe, cfg, runner.devices, log)
    if data_dir is not None:  # every run evaluates at its end: refuse data without held-out rows before a step
        _check_held_out(recipe, runner, data_dir)
    if recipe.train.objective == "rtd":  # the generator and the discriminator over one param tree
        model = rtd_loop.build_pair(recipe, cfg)
    else:
        model = build_model(recipe.model.model_class, cfg, recipe.model.options())
    dummy = jnp.zeros((1, recipe.data.seq_len), jnp.int32)
    schedule = prepare_runner(runner, model, recipe.optim, recipe.train.steps, recipe.train.seed, (dummy, dummy),
                              recipe.train.norm_metrics)
    tr = recipe.train
    warmup = _batch_warmup(recipe, runner, log)
    log(f"{recipe.name}: {model.__class__.__name__} {cfg.num_hidden_layers}x{cfg.hidden_size}, vocab "
        f"{cfg.vocab_size}, T={recipe.data.seq_len}; {runner.describe()}; global batch "
        f"{parallel.global_batch_size(recipe, runner)} = {tr.per_device_batch_size} x {runner.num_devices} "
        f"device(s) x {tr.accum_steps} accumulation; workdir {workdir}")
    return _Run(recipe, workdir, cfg, model, runner, data_dir, tok_dir, log, primary, t0, schedule, warmup)


def _batch_warmup(recipe: Recipe, runner, log) -> BatchWarmup | None:
    """The batch-size warmup a recipe asks for, on this run's devices; None when it asks for none."""
    tr = recipe.train
    if tr.batch_warmup_start is None:
        return None
    full = parallel.global_batch_size(recipe, runner)
    if tr.batch_warmup_start >= full:
        raise RecipeError(f"train.batch_warmup_start: {tr.batch_warmup_start} sequences is not below the global "
                          f"batch of {full} on {runner.num_devices} device(s); lower it or set it to null")
    warmup = BatchWarmup(tr.batch_warmup_start, tr.batch_warmup_tokens, full // tr.accum_steps, tr.accum_steps,
                         recipe.data.seq_len)
    log(f"batch-size warmup: {warmup.sequences(0)} sequences ({warmup.first} of {tr.accum_steps} micro-batches) "
        f"growing to {full} over {tr.batch_warmup_tokens:,} tokens")
    return warmup


def _held_out_sources(recipe: Recipe, runner) -> list:
    """A mixture's held-out splits, each to be read whole, in evaluation batches (sources.held_out_sources)."""
    return sources.held_out_sources(recipe, parallel.host_batch_size(recipe, runner) // recipe.train.accum_steps,
                                    process_index=jax.process_index(), process_count=jax.process_count())


def _check_held_out(recipe: Recipe, runner, data_dir: str) -> None:
    """The validation split holds at least one evaluation batch (the loader refuses fewer), named; with a
    mixture read whole (eval_batches 0), that of every source."""
    rows = parallel.host_batch_size(recipe, runner) // recipe.train.accum_steps
    try:
        sources.make_source(recipe, data_dir, rows, split="validation", process_index=jax.process_index(),
                            process_count=jax.process_count(), fixed_masking=True)
        if not recipe.train.eval_batches and recipe.data.sources:
            _held_out_sources(recipe, runner)
    except DataCompatibilityError as e:
        raise DataCompatibilityError(f"evaluation needs held-out rows: {e}; prepare {data_dir} with a larger "
                                     f"--validation-fraction (or data.validation_fraction)") from None


def _restore_or_initialise(run: _Run, session: Session) -> tuple[Start, object]:
    """(where the run starts, its train source): the newest readable checkpoint's, or a fresh start
    (warm-started from model.init_from when the recipe names one). The effective recipe is written
    once the checkpoints accepted it: a refused recipe does not replace the one the run was saved with."""
    recipe, runner = run.recipe, run.runner
    source = run.make_source("train")

    def accept(step: int, meta: dict) -> None:
        if step < recipe.train.steps:
            # The data position is global (sequences consumed by all processes together), the same in
            # every process's record: any process count, device count or batch size continues from it.
            # Refused here (another seed, other data) the recipe on disk stays the one the run was saved with.
            source.restore(meta["loader"][0])

    def fresh():
        state = runner.create_state()
        if recipe.model.init_from:
            params = jax.device_get(runner.to_saved(state).params)
            if recipe.train.objective == "rtd":  # both models, into the joint tree (jaxbert.train.rtd_warmstart)
                return state.replace(params=runner.place_params(
                    rtd_warmstart.warm_start(recipe, run.cfg, params, run.log)))
            loaded = warmstart.load_source_params(recipe.model.init_from, recipe.model.model_class, run.log)
            state = state.replace(params=runner.place_params(
                warmstart.merge(params, loaded, recipe.model.scan_layers, run.log, tile=recipe.model.init_tile,
                                fused_outputs=family_of(run.cfg).fused_outputs)))
        return state

    start = session.restore_or_initialise(
        runner, recipe.train.seed, recipe.to_dict(), recipe.train.steps, fresh=fresh, accept=accept,
        save_recipe=lambda: save_effective(recipe, run.workdir) if run.primary else None)
    if start.meta is not None and start.step < recipe.train.steps:
        _note_changes(run, start)
    return start, source


def _note_changes(run: _Run, start: Start) -> None:
    """Says what a resumed run does differently from the steps before its checkpoint."""
    recipe, saved = run.recipe, workdir_lib.saved_recipe(start.meta)
    saved_dropout = saved.get("model", {}).get("dropout_impl")
    if saved_dropout is not None and saved_dropout != recipe.model.dropout_impl:
        run.log(f"note: steps up to {start.step} drew dropout bits with dropout_impl {saved_dropout}; this run goes "
                f"on with {recipe.model.dropout_impl} (--set model.dropout_impl={saved_dropout} keeps the old one)")
    saved_steps = saved.get("train", {}).get("steps")
    if saved_steps is not None and saved_steps != recipe.train.steps:
        run.log(f"note: the run was saved planning {saved_steps} steps and now trains to {recipe.train.steps}: the "
                f"learning-rate schedule follows the new step count (at step {start.step} it is "
                f"{float(run.schedule(start.step)):.3g})")


def _train(run: _Run, session: Session, start: Start, source, stop_at: int | None = None):
    """Steps start+1 .. train.steps on the engine: logs, evaluations and checkpoints as the recipe asks;
    SIGTERM saves and stops. Returns (state, step, status, last logged train metrics, last eval metrics)."""
    task = (RtdTask if run.recipe.train.objective == "rtd" else MlmTask)(run, source, start.step)
    out = session.train(task, run.runner, start, stop_at)
    last_eval = task.last_eval
    if out.status == "finished" and not last_eval:  # resumed at the end: report the held-out figures anyway
        last_eval = task.evaluate(out.state)
    return out.state, out.step, out.status, task.last, last_eval


def _position(state: dict) -> int:
    """Sequences a train source's state records as consumed (a folder's epoch and offset, or position)."""
    if "position" in state:
        return int(state["position"])
    return int(state["epoch"]) * int(state["examples"]) + int(state["offset"])


def _take(source, n: int) -> dict:
    """n micro-batches [n, B, ...] off a train source: in one read where it can (take), else one by one."""
    take = getattr(source, "take", None)
    if take is not None:
        return take(n)
    parts = [next(source) for _ in range(n)]
    return {k: np.stack([p[k] for p in parts]) for k in parts[0]}


def _padded(batch: dict, warmup: BatchWarmup, nsp: bool) -> dict:
    """A warmup step's n micro-batches padded to its compiled count (warmup.bucket(n)) with copies of
    the last one that weigh nothing: zero masked weights (and, with NSP, zero sequence weights), so the
    loss, the gradients and the metric sums are those of the n micro-batches alone."""
    n = len(batch["input_ids"])
    pad = warmup.bucket(n) - n
    if nsp:  # every row of the n micro-batches counts in the NSP loss, none of the padding's
        batch["next_sentence_weights"] = np.ones(batch["next_sentence_labels"].shape, np.float32)
    if not pad:
        return batch
    out = {}
    for k, v in batch.items():
        extra = np.repeat(v[-1:], pad, axis=0)
        if k in ("masked_weights", "next_sentence_weights"):
            extra = np.zeros_like(extra)
        out[k] = np.concatenate([v, extra])
    return out


class MlmTask:
    """MLM (and NSP) pretraining as the engine's task: batches from the prepared data (or synthetic),
    held-out figures over train.eval_batches fixed-masking batches, the loader position in each checkpoint."""

    step = MLM

    def __init__(self, run: _Run, source, start: int):
        recipe, tr = run.recipe, run.recipe.train
        self.run, self.source, self.recipe = run, source, recipe
        if run.warmup is not None and start:  # the batch goes on growing from the tokens the run has read
            run.warmup.resume(start, _position(source.state()) * recipe.data.seq_len)
        self.apply_fn, self.total, self.log_every = run.model.apply, tr.steps, tr.log_every
        self.eval_fn = engine.compile_eval(self, run.runner)
        self.eval_batches = tr.eval_batches or getattr(run.make_source("validation"), "steps_per_epoch", 1)
        self._held_out = None  # a mixture at eval_batches 0: each source's held-out split, read whole
        if not tr.eval_batches and recipe.data.sources:
            self._held_out = _held_out_sources(recipe, run.runner)
            self.eval_batches = sum(-(-h.num_examples // h.global_batch_size) for _, _, h in self._held_out)
        # a warmup's steps cost their compiled micro-batches: the time left is costed by them, not by steps
        work = None if run.warmup is None else (lambda first, last: run.warmup.work(first - 1, last - 1))
        self.progress = Progress(recipe.name, tr.steps, start, tr.eval_every, self.eval_batches, run.log,
                                 active=run.primary, work=work)
        T = recipe.data.seq_len
        self._throughput = (parallel.global_batch_size(recipe, run.runner) * T, T,
                            train_flops_per_token(run.cfg, T, recipe.data.masked_slots() / T),
                            peak_flops(jax.devices()[0].device_kind))
        self.last, self.last_eval = {}, {}
        self._logged_through = self._step = start
        # a mixture's sources: rows read from each after each step's batch, counted when the batch is read
        # (batches run ahead of the steps; counting then, at the loader's own position, reuses the schedule
        # blocks it just built instead of evicting them), and the sources already repeating (warned once)
        self._mixture = getattr(source, "source_rows", lambda state=None: {})
        self._read: dict[int, dict] = {}
        now = self._mixture()  # {} but for a mixture
        self._repeating = {name for name, (read, rows) in now.items() if read > rows} if now else None

    summarize = staticmethod(summarize)

    def batches(self, start: int):
        accum, warmup, step = self.recipe.train.accum_steps, self.run.warmup, start
        while True:
            if warmup is None:
                b = next(self.source, None)
                if b is None:
                    return
                batch = {k: v.reshape(accum, v.shape[0] // accum, *v.shape[1:]) for k, v in b.items()}
            else:  # batch-size warmup: step `step` (0-based) takes its count of micro-batches off the stream
                batch = _take(self.source, warmup.micro_batches(step))
                if self.step is MLM:  # padding that weighs nothing is MLM's (zero masked weights); others: as read
                    batch = _padded(batch, warmup, self.recipe.data.nsp)
            state, step = self.source.state(), step + 1
            if self._repeating is not None:
                self._read[step] = self._mixture(state)
            yield batch, state

    def throughput(self):
        """(tokens per step, T, FLOPs per token, peak); during a batch-size warmup the tokens per step are
        the mean over the steps this log line covers (those since the last one)."""
        warmup, first, step = self.run.warmup, self._logged_through + 1, self._step
        if warmup is not None and first <= step:
            sequences = sum(warmup.sequences(s - 1) for s in range(first, step + 1)) / (step - first + 1)
            self._throughput = (sequences * self.recipe.data.seq_len, *self._throughput[1:])
        self._logged_through = step
        return self._throughput

    def stepped(self, step: int) -> None:
        self._step = step
        self.progress.step(step)
        for name, (read, rows) in self._read.get(step, {}).items():
            if read > rows and name not in self._repeating:
                self._repeating.add(name)
                self.run.log(f"warning: source {name} repeats from step {step}: its {rows:,} rows were all read "
                             f"and its second pass begins (a lower weight, or more data, keeps it fresh)")

    def source_figures(self, step: int) -> dict:
        """tokens/NAME and epochs/NAME of a mixture's sources after `step` (rows read x row length)."""
        T = self.recipe.data.seq_len
        return {key: value for name, (read, rows) in self._read.get(step, {}).items()
                for key, value in ((f"tokens/{name}", read * T), (f"epochs/{name}", round(read / rows, 4)))}

    def logged(self, step: int, scalars: dict) -> None:
        scalars.update(self.source_figures(step))
        for old in [s for s in self._read if s < step]:  # stepped() and logged() of earlier steps are done
            del self._read[old]
        scalars["elapsed_s"] = round(time.time() - self.run.t0, 1)
        if self.run.warmup is not None:
            scalars["batch_size"] = self.run.warmup.sequences(step - 1)
        self.last = scalars
        self.progress.log_step(step, scalars)

    def eval_due(self, step: int) -> bool:
        return bool(self.recipe.train.eval_every) and step % self.recipe.train.eval_every == 0

    def evaluate(self, state) -> dict:
        """Held-out figures: over eval_batches batches of the validation stream; a mixture at eval_batches 0
        over each source's split whole (eval_*/NAME), and the mixture's as its sources' weighed by their
        shares of the stream (eval_*)."""
        if self._held_out is None:
            sums = self._sums(state, zip(range(self.eval_batches), self.run.make_source("validation")))
            return self.summarize(sums, "eval_") if sums else {}
        mixed, each = {}, {}
        for name, share, loader in self._held_out:
            for key, value in self.summarize(self._sums(state, enumerate(loader.whole())), "eval_").items():
                each[f"{key}/{name}"] = value
                mixed[key] = mixed.get(key, 0.0) + share * value
        return {**mixed, **each}

    def _sums(self, state, batches) -> dict:
        runner, sums = self.run.runner, {}
        for _, host in batches:
            m = runner.metrics_to_host(self.eval_fn(runner.params_of(state), runner.shard_batch(host, eval=True)))
            sums = {k: sums.get(k, 0.0) + v for k, v in m.items()}
        return sums

    def evaluated(self, step: int, state, figures: dict, seconds: float) -> None:
        self.last_eval = figures
        self.progress.evaluated(step, seconds, figures)

    def checkpoint_meta(self, step: int, loader_state) -> dict:
        return workdir_lib.checkpoint_meta(step, hosts.allgather_json(loader_state), self.recipe.to_dict(),
                                           self.run.cfg, self.recipe.model.model_class)

    def close(self) -> None:
        self.progress.close()


class RtdTask(MlmTask):
    """MlmTask with the replaced-token-detection objective and figures (train.objective: rtd, jaxbert.train.rtd_loop)."""

    def __init__(self, run: _Run, source, start: int):
        self.step, self.summarize = rtd_loop.objective(run.recipe)  # before MlmTask compiles the eval step
        super().__init__(run, source, start)
        tokens, T, _, peak = self._throughput
        self._throughput = (tokens, T, rtd_loop.flops_per_token(run.recipe, run.cfg), peak)


def _finish(run: _Run, state, step: int, status: str, last: dict, last_eval: dict) -> dict:
    """The run's summary; a finished run also writes the recipe's outputs (plot, export, fill-mask)."""
    summary = {"status": status, "step": step, "wall_s": round(time.time() - run.t0, 1),
               "train": last, "eval": last_eval, "workdir": str(run.workdir), "tokenizer": run.tok_dir}
    o = run.recipe.outputs
    if status == "finished" and (o.plot or o.export or o.fill_mask):
        params = engine.host_params(run.runner, state)
        if run.primary and run.recipe.train.objective == "rtd":
            rtd_loop.finish(run.recipe, run.workdir, run.cfg, params, run.tok_dir, run.log)
        elif run.primary:
            finish(run.recipe, run.workdir, run.model, params, run.tok_dir, run.log)
    return summary
