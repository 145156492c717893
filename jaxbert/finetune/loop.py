"""finetune(recipe, spec, source, workdir): fine-tune a pretrained encoder on a task, on the
pretraining runner (mesh data parallel and FSDP, or pmap), and export the best model.

The phases follow jaxbert.train.loop: `prepare` reads and checks everything (data, tokenizer,
SRC, recipe) before anything is written; then, with the workdir locked, `_restore_or_initialise`
resumes from the newest checkpoint or starts from SRC's params; `_train` runs the steps,
evaluating every train.eval_every steps, at each epoch end and at the end; `_finish` prints
the table. Every training batch is a fixed number of rows cut to its bucket length, so the
step compiles once per bucket. The data order is a function of (seed, epoch) and the dropout
key of (seed, step), so a run resumed at step k ends with the params of one that never stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import time
from pathlib import Path

import jax
import numpy as np

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.convert.export import export_params
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.errors import InputError
from jaxbert.finetune import kinds
from jaxbert.finetune.batching import batches, buckets_for, n_batches
from jaxbert.finetune.glue import glue_task
from jaxbert.finetune.losses import summarize
from jaxbert.finetune.model import OPTIONS_KEY, LoadedModel, load_task_model, source_config
from jaxbert.finetune.recipe import FinetuneRecipe
from jaxbert.finetune.eval_report import main_score, table, write_eval_json
from jaxbert.finetune.eval_outputs import Collector
from jaxbert.finetune.source_identity import KEYS as SOURCE_KEYS
from jaxbert.finetune.source_identity import source_identity
from jaxbert.finetune.step import eval_outputs, step_spec
from jaxbert.finetune.task_data import TaskData, TaskSpec, read_task_data
from jaxbert.model.configs import position_limit
from jaxbert.model.families import family_of
from jaxbert.model.classes import build_model, dummy_inputs
from jaxbert.model.params import unscan_params
from jaxbert.engine import loop as engine
from jaxbert.engine import parallel
from jaxbert.engine.lock import workdir_lock
from jaxbert.engine.recipe import RecipeError
from jaxbert.engine.session import Session, Start
from jaxbert.engine.session import prepare_runner as prepare_engine_runner


@dataclasses.dataclass
class Prepared:
    """Everything a run needs, read and checked; nothing written yet."""
    recipe: FinetuneRecipe
    data: TaskData
    source: str
    tok_dir: Path
    loaded: LoadedModel
    train: object  # Features
    evals: dict  # eval set -> (Features, QAWindows | None)
    identity: dict = dataclasses.field(default_factory=dict)  # SRC's path and fingerprint (source_identity)


def prepare(recipe: FinetuneRecipe, spec: TaskSpec, source, tokenizer=None, log=print) -> Prepared:
    """Reads the data, the tokenizer and SRC; raises InputError (one line, naming the file) on bad input."""
    kind = spec.kind
    if recipe.data.sources is not None or recipe.data.batch_per_source:
        key = "data.sources" if recipe.data.sources is not None else "data.batch_per_source"
        raise RecipeError(f"{key}: several training files are read by --task embedding alone; --task {spec.name} "
                          "trains on --train FILE")
    options = recipe.options_for(kind)  # kinds.<kind> of the recipe, typed by the kind
    data = read_task_data(spec, options)
    own = source_config(source)  # its family's config class (BertConfig, ModernBertConfig)
    tok_dir = tokenizer if tokenizer is not None else workdir_lib.tokenizer_path(source)
    if tok_dir is None:
        raise InputError(f"{source}: no tokenizer beside it (tokenizer.json, vocab.txt or spm.model); pass --tokenizer DIR")
    tok = load_tokenizer(tok_dir)
    recipe = fit_max_length(recipe, own, source, log)
    d = recipe.data
    featurize = lambda examples: kind.featurize(examples, tok, d.max_length, options, data.labels)
    train = featurize(data.train)[0]
    evals = {name: featurize(examples) for name, examples in data.evals.items()}
    cut = {"train": train.n_truncated, **{n: f.n_truncated for n, (f, _) in evals.items()}}
    what = kind.truncation(d.max_length)
    log(f"{spec.name}: {len(data.train)} training examples ({len(train)} features), "
        + ", ".join(f"{n} {len(data.evals[n])}" for n in evals) + f" eval; {what}: "
        + ", ".join(f"{n} {c}" for n, c in cut.items()))
    info = {"kind": kind.name, "text_columns": list(spec.text_columns), "label_column": spec.label_column,
            "max_length": d.max_length, OPTIONS_KEY: dataclasses.asdict(options)}
    if spec.glue:  # predict reads files with the preset's columns
        preset = glue_task(spec.glue)
        info.update(glue=preset.name, text_columns=list(preset.text_columns), label_column=preset.label_column)
    loaded = load_task_model(source, kind, data.labels, scan_layers=recipe.model.scan_layers,
                             dtype=recipe.model.param_dtype, seed=recipe.train.seed, task_info=info)
    cfg = loaded.config
    limit = position_limit(cfg)
    if d.max_length > limit:
        raise RecipeError(f"data.max_length: {d.max_length} is more than the {limit} positions of {source}")
    if (tok.get_vocab_size() > cfg.vocab_size):
        raise InputError(f"{tok_dir}: its vocabulary ({tok.get_vocab_size()}) is larger than {source}'s "
                         f"({cfg.vocab_size}); is it the model's tokenizer?")
    log(loaded.describe(source))
    return Prepared(recipe, data, str(source), Path(str(tok_dir)), loaded, train, evals, source_identity(source))


def fit_max_length(recipe: FinetuneRecipe, cfg, source, log=print) -> FinetuneRecipe:
    """The recipe with data.max_length cut to SRC's position table, saying so (a recipe's 128 on a model of 64)."""
    limit = position_limit(cfg)
    if recipe.data.max_length <= limit:
        return recipe
    log(f"data.max_length: {recipe.data.max_length} is more than the {limit} positions of {source}; using {limit} "
        f"(--set data.max_length=N to choose)")
    return dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, max_length=limit))


def finetune(recipe: FinetuneRecipe, spec: TaskSpec, source, workdir, tokenizer=None, stop_at: int | None = None,
             log=print) -> dict:
    """Fine-tunes SRC on the task into workdir; returns a summary (status, step, best, history, ...).

    stop_at: save and stop after this step, as a SIGTERM would (a later call resumes).
    The workdir is created only after every input was read and checked.
    """
    if not jax.distributed.is_initialized():
        parallel.initialize_distributed(recipe.parallel)
    primary = jax.process_index() == 0
    log = log if primary else (lambda msg: None)
    prep = prepare(recipe, spec, source, tokenizer, log)
    with workdir_lib.claimed(workdir, workdir_lib.FINETUNING, active=primary):
        if primary:
            check_best(workdir)
        with workdir_lock(workdir, active=primary, log=log):
            return _run(prep, fs.as_path(workdir), stop_at, log, primary)


def check_best(workdir) -> None:
    """WORKDIR/best is replaced at every better evaluation: refuse, before training, one jaxbert did not write."""
    best = workdir_lib.path(workdir, workdir_lib.BEST)
    if best.exists() and fs.output_kind(best) is None:
        raise InputError(f"{best}: exists and is not a model jaxbert exported (no {fs.MARKER}); the run would "
                         f"replace it with its best model: move it out of the workdir first")


@dataclasses.dataclass
class _Run:
    prep: Prepared
    workdir: Path
    model: object
    runner: object
    batch: int  # global rows per optimizer step
    eval_batch: int
    per_epoch: int  # optimizer steps per epoch
    total: int
    log: object
    primary: bool
    t0: float

    @property
    def kind(self) -> kinds.Kind:
        return self.prep.data.kind

    @property
    def source(self) -> dict:
        return self.prep.identity


def _run(prep: Prepared, workdir: Path, stop_at, log, primary) -> dict:
    r, t0 = prep.recipe, time.time()
    runner = parallel.make_runner(r.parallel)
    if runner.strategy == "pmap" and jax.process_count() > 1:
        raise RecipeError("parallel.strategy: fine-tuning over several hosts needs mesh")
    batch = parallel.global_batch_size(r, runner)
    eval_batch = r.train.eval_batch_size or batch // r.train.accum_steps
    if eval_batch % runner.num_devices:
        raise RecipeError(f"train.eval_batch_size: {eval_batch} does not divide over {runner.num_devices} devices")
    per_epoch = n_batches(len(prep.train), batch)
    total = r.train.steps or max(1, math.ceil(r.train.epochs * per_epoch))
    loaded = prep.loaded
    model = prepare_runner(r, runner, loaded.class_name, loaded.config, total)
    log(f"{r.name}: {loaded.class_name} {loaded.config.num_hidden_layers}x{loaded.config.hidden_size}; "
        f"{runner.describe()}; batch {batch}, {per_epoch} steps per epoch, {total} steps, warmup "
        f"{r.optim_for(total).warmup_steps}; workdir {workdir}")
    run = _Run(prep, workdir, model, runner, batch, eval_batch, per_epoch, total, log, primary, t0)
    with Session(workdir, r.checkpoint, log, primary) as session:
        start, history = _restore_or_initialise(run, session)
        if start.step >= total:
            log(f"{workdir} is finished at step {start.step}; --workdir NEW for a fresh run")
            return _summary(run, "already finished", start.step, history)
        step, status, history = _train(run, session, start, history, stop_at)
    return _finish(run, step, status, history)


def prepare_runner(recipe: FinetuneRecipe, runner, class_name: str, config, total: int):
    """The task model, with `runner` prepared for it: the recipe's optimizer and schedule over
    `total` steps, params initialised from the recipe's seed. `finetune` trains with this, and
    `jaxbert bench`'s finetune work times the same."""
    model = build_model(class_name, config, recipe.model.options())
    prepare_engine_runner(runner, model, recipe.optim, total, recipe.train.seed, dummy_inputs(class_name, 1, 8),
                          recipe.train.norm_metrics)
    return model


def _task_record(run: _Run) -> dict:
    """What a checkpoint must agree on to be resumed: the task, its labels, its epoch length, the
    content of the data it trains on (a fingerprint of the featurized training arrays) and the model
    it was fine-tuned from (jaxbert.finetune.source_identity)."""
    data = run.prep.data
    return {"task": data.spec.name, "labels": None if data.labels is None else list(data.labels),
            "train_features": len(run.prep.train), "steps_per_epoch": run.per_epoch,
            "train_fingerprint": fingerprint(run.prep.train), **run.source}


def fingerprint(features) -> str:
    """sha256 (first 16 hex digits) of a split's arrays, keys in order: any changed text, label or length shows."""
    h = hashlib.sha256()
    for key in sorted(features.arrays):
        a = np.ascontiguousarray(features.arrays[key])
        h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


# How a changed record field is said when a resume is refused.
_RECORD_MEANING = {"task": "the task", "labels": "the labels", "train_features": "the number of training rows",
                   "steps_per_epoch": "the steps per epoch (the global batch size or the training rows)",
                   "train_fingerprint": "the training data's content", "sources": "the training files (data.sources)",
                   "batch_per_source": "data.batch_per_source", "options": "the kind's options"}


def resume_refusal(where, meta: dict, now: dict) -> str:
    """Why a checkpoint cannot be resumed by this run, naming what differs: only the batch size, or the data."""
    saved = workdir_lib.task_record(meta)
    changed = [k for k in now if k in saved and saved[k] != now[k]]
    if changed == ["steps_per_epoch"]:  # same task, labels and rows: the batch changed
        train = workdir_lib.saved_recipe(meta).get("train") or {}
        was = f"per_device_batch_size {train.get('per_device_batch_size')}, accum_steps {train.get('accum_steps')}"
        return (f"{where} was saved with another batch size ({was}: {saved['steps_per_epoch']} steps per epoch, "
                f"{now['steps_per_epoch']} now); a fine-tuning run resumes with the batch it started with: rerun "
                f"with that batch, or train in a new --workdir")
    what = "; ".join(f"{_RECORD_MEANING.get(k, k)}: saved {saved[k]!r}, now {now[k]!r}" for k in changed[:3])
    if not changed:  # a checkpoint of an older jaxbert: it recorded no fingerprint
        what = f"it records no fingerprint of its training data ({sorted(set(now) - set(saved))} missing)"
    return (f"{where} cannot be resumed by this run: {what}; run with what it was saved with, or train in "
            f"a new --workdir")


def _restore_or_initialise(run: _Run, session: Session) -> tuple[Start, list]:
    """(where the run starts, its evaluation history): the newest checkpoint's, or SRC's params at step 0."""
    recipe, runner = run.prep.recipe, run.runner
    now = _task_record(run)
    if session.ckpt.steps():
        check_source(run.workdir, run.source, workdir_lib.newest_task_record(run.workdir))  # the model first

    def accept(step: int, meta: dict) -> None:
        saved = workdir_lib.task_record(meta)
        check_source(run.workdir, run.source, saved)
        current = {k: v for k, v in now.items() if k in saved or k not in SOURCE_KEYS}  # older records lack them
        if saved != current:
            raise InputError(resume_refusal(session.ckpt.directory / str(step), meta, current))

    start = session.restore_or_initialise(
        runner, recipe.train.seed, recipe.to_dict(), run.total, accept=accept, save_recipe=lambda: _save_recipe(run),
        fresh=lambda: runner.create_state(runner.place_params(run.prep.loaded.params)))  # no random init to discard
    return start, ([] if start.meta is None else workdir_lib.task_history(start.meta))


def check_source(workdir, now: dict, saved: dict) -> None:
    """A workdir's checkpoints resume only from the model they were fine-tuned from (now: its
    source_identity): the same resolved path with the same fingerprint. A record without one (an older
    jaxbert) is not checked."""
    if "source" not in saved:
        return
    if saved["source"] != now["source"]:
        raise InputError(f"{workdir} holds a fine-tune of {saved['source']}, not of {now['source']}: its "
                         f"checkpoints and scores are that model's; pass a new --workdir, or --model "
                         f"{saved['source']} to resume it")
    if saved.get("source_fingerprint") != now["source_fingerprint"]:
        raise InputError(f"{workdir} was fine-tuned from {now['source']} as it was then (fingerprint "
                         f"{saved.get('source_fingerprint')}); its files have changed since "
                         f"({now['source_fingerprint']} now): pass a new --workdir")


def _save_recipe(run: _Run) -> None:
    if run.primary:
        workdir_lib.write_recipe(run.workdir, {"task": run.prep.data.spec.to_dict(), "source": run.prep.source,
                                               **run.prep.recipe.to_dict()})


class FinetuneTask:
    """Fine-tuning as the engine's task: bucketed batches in an order drawn from (seed, epoch),
    evaluation at each epoch end and every train.eval_every steps, the best model exported to
    WORKDIR/best, the evaluation history in every checkpoint."""

    def __init__(self, run: _Run, history: list):
        r = run.prep.recipe
        self.run, self.history, self.main = run, history, run.prep.data.main
        self.step, self.apply_fn = step_spec(run.kind), run.model.apply
        self.total, self.log_every = run.total, r.train.log_every
        self.eval_fn = engine.compile_eval(self, run.runner, eval_outputs(run.kind))
        self.best = max(history, key=lambda h: main_score(h, self.main)) if history else None
        # every epoch's order is known now: bucket lengths fitted to this run's batches
        self.buckets = buckets_for(run.prep.train, run.batch, r.train.seed, math.ceil(run.total / run.per_epoch),
                                   shuffle=True)

    summarize = staticmethod(summarize)

    def batches(self, start: int):
        """This process's share [A, B_host, ...] of each step's batch from step `start` on: epoch e's
        rows in the order drawn from (seed, e), the step's place in its epoch skipped to."""
        run, r = self.run, self.run.prep.recipe
        A, n_proc, pid = r.train.accum_steps, jax.process_count(), jax.process_index()
        rows = run.batch // A // n_proc
        for epoch in itertools.count(start // run.per_epoch):
            skip = start - epoch * run.per_epoch if epoch == start // run.per_epoch else 0
            for b in itertools.islice(batches(run.prep.train, run.batch, shuffle=True, seed=r.train.seed,
                                              epoch=epoch, buckets=self.buckets), skip, None):
                b.pop("index")
                yield {k: v.reshape(A, run.batch // A, *v.shape[1:])[:, pid * rows:(pid + 1) * rows]
                       for k, v in b.items()}, None

    def throughput(self):
        return None  # batches are cut to their bucket: no fixed tokens per step

    def stepped(self, step: int) -> None:
        pass

    def logged(self, step: int, scalars: dict) -> None:
        epoch = step / self.run.per_epoch
        scalars.update(epoch=round(epoch, 4), elapsed_s=round(time.time() - self.run.t0, 1))
        rate = f", {scalars['steps_per_s']:.2f} steps/s" if "steps_per_s" in scalars else ""
        self.run.log(f"step {step}/{self.total} epoch {epoch:.2f} loss {scalars['loss']:.4f} "
                     f"lr {scalars['learning_rate']:.2e}{rate}")

    def eval_due(self, step: int) -> bool:
        every = self.run.prep.recipe.train.eval_every
        return step % self.run.per_epoch == 0 or bool(every and step % every == 0)

    def evaluate(self, state) -> dict:
        evals = self._evals = evaluate(self.run, self.run.runner.params_of(state), self.eval_fn)
        return {f"eval_{n}_{k}": v for n, ms in evals.items() for k, v in ms.items()}

    def evaluated(self, step: int, state, figures: dict, seconds: float) -> None:
        run = self.run
        record = {"step": step, "epoch": round(step / run.per_epoch, 4), "evals": self._evals}
        self.history.append(record)
        improved = self.best is None or main_score(record, self.main) > main_score(self.best, self.main)
        run.log(f"eval at step {step}: " + "; ".join(
            f"{n} " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items()) for n, ms in record["evals"].items())
            + (" (best so far)" if improved else ""))
        if improved:
            self.best = record
            _export_best(run, state)
        if run.primary:
            write_eval_json(run.workdir, run.prep.data.spec.name, self.main, self.history, self.best)

    def checkpoint_meta(self, step: int, loader_state) -> dict:
        run = self.run
        return workdir_lib.checkpoint_meta(step, [{"epoch": step // run.per_epoch}], run.prep.recipe.to_dict(),
                                           run.prep.loaded.config, run.prep.loaded.class_name,
                                           task=(_task_record(run), self.history))


def evaluate(run: _Run, params, eval_fn) -> dict:
    """{eval set: metrics (the task's, plus loss)} over every eval set, each row once."""
    prep, runner = run.prep, run.runner
    n_proc, pid = jax.process_count(), jax.process_index()
    rows = run.eval_batch // n_proc
    out = {}
    for name, (features, windows) in prep.evals.items():
        collect, sums = Collector(len(features), features.length), {}
        for b in batches(features, run.eval_batch, buckets=buckets_for(features, run.eval_batch)):
            index = b.pop("index")
            got = jax.device_get(eval_fn(params, runner.shard_batch(
                {k: v[pid * rows:(pid + 1) * rows] for k, v in b.items()}, eval=True)))
            if runner.strategy == "pmap":  # [devices, rows per device, ...]; sums replicated
                got = {"sums": {k: v[0] for k, v in got["sums"].items()},
                       "outputs": {k: v.reshape(-1, *v.shape[2:]) for k, v in got["outputs"].items()}}
            sums = {k: sums.get(k, 0.0) + float(v) for k, v in got["sums"].items()}
            collect.add(got["outputs"], index)
        kind = run.kind
        decoded = kind.decode(collect.result(), features, windows, prep.data.labels, prep.data.options)
        metrics = kind.score(prep.data.metrics, decoded["predictions"], prep.data.evals[name], prep.data.labels)
        metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        metrics.update(summarize(sums))
        out[name] = metrics
    return out


def _export_best(run: _Run, state) -> None:
    params = engine.host_params(run.runner, state)
    if run.prep.recipe.model.scan_layers:  # the family's own layer stack (ModernBERT's is not BERT's)
        params = unscan_params(params, (family_of(run.prep.loaded.config).layer_stack,))
    if run.primary:
        loaded = run.prep.loaded
        export_params(workdir_lib.path(run.workdir, workdir_lib.BEST), loaded.config, loaded.class_name, params,
                      run.prep.tok_dir, overwrite=True)


def _train(run: _Run, session: Session, start: Start, history: list, stop_at):
    task = FinetuneTask(run, history)
    out = session.train(task, run.runner, start, stop_at)
    return out.step, out.status, task.history


def _summary(run: _Run, status: str, step: int, history: list) -> dict:
    main = run.prep.data.main
    best = max(history, key=lambda h: main_score(h, main)) if history else None
    return {"status": status, "step": step, "total": run.total, "history": history, "best": best, "main": main,
            "workdir": str(run.workdir), "best_dir": str(workdir_lib.path(run.workdir, workdir_lib.BEST)),
            "wall_s": round(time.time() - run.t0, 1)}


def _finish(run: _Run, step: int, status: str, history: list) -> dict:
    summary = _summary(run, status, step, history)
    run.log(table(history, run.prep.data.main))
    return summary
