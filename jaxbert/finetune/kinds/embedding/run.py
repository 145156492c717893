"""`jaxbert finetune --task embedding`: contrastive training of SRC's bare encoder on the mesh runner.

The data (one --train file or the recipe's data.sources, and the eval files), SRC, its tokenizer and the
recipe are read and checked before the workdir is claimed: the kind's options against the model and
batch (kinds.embedding.check_run: Matryoshka dims, mini_batch_size, no accumulation), the strategy
(mesh: every anchor scores every candidate of the global batch). The rows each step trains on are
jaxbert.finetune.kinds.embedding.sources' schedule, a function of (seed, step); each batch is cut to the
bucket length of its longest text, each column its own (short queries are not padded to the
passages). The step is jaxbert.finetune.kinds.embedding.step's (GradCache with
mini_batch_size), run by the engine's loop (jaxbert.engine.loop) as every fine-tuning kind's is: Orbax
checkpoints every checkpoint.every_steps, at a stop and at the end (the state, the learned temperature
with it, the dropout key, the evaluation history), so a run started again in its workdir resumes where
it stopped and ends with the params and evaluations of one that never stopped; a workdir of another
task, recipe, data or model is refused, naming what differs (jaxbert.finetune.loop's checks).

Before the first step (the source as it came), at each epoch end, every train.eval_every steps and at
the end, each eval file is scored (jaxbert.finetune.kinds.embedding.evaluation: retrieval, or Spearman
for STS pairs); the best by the first file's nDCG@10 (its Spearman when it holds STS pairs) is exported
to WORKDIR/best as a sentence-transformers directory, and WORKDIR/eval.json lists every evaluation (with
the temperature where it is learned: log(1 / temperature) is a param beside the encoder's).
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.engine import parallel
from jaxbert.engine.lock import workdir_lock
from jaxbert.engine.loop import host_params
from jaxbert.engine.recipe import RecipeError
from jaxbert.engine.session import Session, prepare_runner
from jaxbert.errors import InputError
from jaxbert.finetune.eval_report import main_score, table, write_eval_json
from jaxbert.finetune.features import bucket_lengths
from jaxbert.finetune.kinds.embedding import check_run, negatives_line
from jaxbert.finetune.kinds.embedding.evaluation import Evaluator, main_metric, read_evals
from jaxbert.finetune.kinds.embedding.export import Settings, write_sentence_transformers
from jaxbert.finetune.kinds.embedding.sources import read_training
from jaxbert.finetune.kinds.embedding.step import LOGIT_KEY, make_train_step, model_params
from jaxbert.finetune.losses import summarize
from jaxbert.finetune.loop import check_best, check_source, resume_refusal
from jaxbert.finetune.model import load_task_model, source_config
from jaxbert.finetune.source_identity import source_identity
from jaxbert.model.classes import build_model, dummy_inputs


def train_embedding(recipe, spec, source, workdir, tokenizer=None, stop_at: int | None = None, log=print) -> dict:
    """Trains (or resumes) and exports; returns the summary `jaxbert finetune` prints (status, step, total,
    best, ...). stop_at: save and stop after this step, as a SIGTERM would (a later call resumes)."""
    if not jax.distributed.is_initialized():
        parallel.initialize_distributed(recipe.parallel)
    primary = jax.process_index() == 0
    log = log if primary else (lambda msg: None)
    t0, r, kind = time.time(), recipe, spec.kind
    options = r.options_for(kind)
    tok_dir = tokenizer if tokenizer is not None else workdir_lib.tokenizer_path(source)
    if tok_dir is None:
        raise InputError(f"{source}: no tokenizer beside it (tokenizer.json, vocab.txt or spm.model); pass --tokenizer DIR")
    tok = load_tokenizer(tok_dir)
    own = source_config(source)
    max_length = min(r.data.max_length, int(own.max_position_embeddings))
    runner = parallel.make_runner(r.parallel)
    if runner.strategy != "mesh":
        raise RecipeError("parallel.strategy: the embedding kind trains on mesh, where every anchor scores every "
                          "candidate of the global batch")
    batch = parallel.global_batch_size(r, runner)
    chunks = check_run(options, int(own.hidden_size), batch, r.train.accum_steps, runner.num_devices)
    training = read_training(spec, r.data, kind, options, tok, max_length, batch, r.train.seed)
    evals = read_evals(spec)
    total = r.train.steps or max(1, math.ceil(r.train.epochs * training.per_epoch))
    info = {"kind": kind.name, "text_columns": list(spec.text_columns), "max_length": max_length,
            "options": kind.options_record(options)}
    loaded = load_task_model(source, kind, None, dtype=r.model.param_dtype, seed=r.train.seed, task_info=info)
    log(loaded.describe(source))
    if len(training.sources) > 1:
        log(f"{len(training.sources)} training files, " + ("each batch from one" if training.schedule.per_source
                                                           else "each row from one") + " drawn by the weights: "
            + ", ".join(f"{s.name} {s.rows} rows, weight {s.weight:g}" for s in training.sources))
    log(negatives_line(options, batch, training.features.arrays["input_ids"].shape[1], chunks))
    run = _Run(r, spec, options, loaded, runner, training, evals, main_metric(evals), tok, tok_dir, max_length,
               batch, chunks, total, fs.as_path(workdir), source_identity(source), log, primary, t0)
    with workdir_lib.claimed(workdir, workdir_lib.FINETUNING, active=primary):
        if primary:
            check_best(workdir)
        with workdir_lock(workdir, active=primary, log=log):
            return _train(run, stop_at)


class _Run:
    """Everything the run needs, read and checked."""

    def __init__(self, recipe, spec, options, loaded, runner, training, evals, main, tok, tok_dir, max_length,
                 batch, chunks, total, workdir, identity, log, primary, t0):
        self.recipe, self.spec, self.options, self.loaded, self.runner = recipe, spec, options, loaded, runner
        self.training, self.evals, self.main, self.tok, self.tok_dir = training, evals, main, tok, tok_dir
        self.max_length, self.batch, self.chunks, self.total = max_length, batch, chunks, total
        self.workdir, self.identity, self.log, self.primary, self.t0 = workdir, identity, log, primary, t0
        self.settings = Settings(options.pooling, True, dict(options.prefixes), max_length)

    def record(self) -> dict:
        """What a checkpoint must agree on to be resumed: the task, its columns and options, the training
        files (names, weights, rows, content), the epoch length and the model fine-tuned from."""
        return {"task": self.spec.name, "text_columns": list(self.spec.text_columns),
                "options": self.spec.kind.options_record(self.options), **self.training.record(), **self.identity}


def _train(run: _Run, stop_at) -> dict:
    r, runner = run.recipe, run.runner
    model = build_model(run.loaded.class_name, run.loaded.config, r.model.options())
    start_params = dict(run.loaded.params)
    if run.options.learn_temperature:  # log(1 / temperature) trained beside the encoder's params
        start_params[LOGIT_KEY] = np.asarray(math.log(1.0 / run.options.temperature), np.float32)
    prepare_runner(runner, _LearnedScale(model, start_params.get(LOGIT_KEY)), r.optim, run.total, r.train.seed,
                   dummy_inputs(run.loaded.class_name, 1, 8), r.train.norm_metrics)
    cfg = run.loaded.config
    run.log(f"{r.name}: {run.loaded.class_name} {cfg.num_hidden_layers}x{cfg.hidden_size}; {runner.describe()}; batch "
            f"{run.batch}, {run.training.per_epoch} steps per epoch, {run.total} steps, warmup "
            f"{r.optim_for(run.total).warmup_steps}; workdir {run.workdir}")
    now = run.record()
    with Session(run.workdir, r.checkpoint, run.log, run.primary) as session:
        if session.ckpt.steps():  # the model first: a workdir of another model says so before the recipe
            check_source(run.workdir, run.identity, workdir_lib.newest_task_record(run.workdir))

        def accept(step: int, meta: dict) -> None:
            saved = workdir_lib.task_record(meta)
            check_source(run.workdir, run.identity, saved)
            if saved != now:
                raise InputError(resume_refusal(session.ckpt.directory / str(step), meta, now))

        def save_recipe() -> None:
            if run.primary:
                workdir_lib.write_recipe(run.workdir, {"task": run.spec.to_dict(), "source": run.identity["source"],
                                                       **r.to_dict()})

        start = session.restore_or_initialise(
            runner, r.train.seed, r.to_dict(), run.total, accept=accept, save_recipe=save_recipe,
            fresh=lambda: runner.create_state(runner.place_params(start_params)))
        history = [] if start.meta is None else workdir_lib.task_history(start.meta)
        if start.step >= run.total:
            run.log(f"{run.workdir} is finished at step {start.step}; --workdir NEW for a fresh run")
            return _summary(run, "already finished", start.step, history)
        task = EmbeddingTask(run, model, history)
        if start.step == 0 and run.evals:  # SRC as it came: what training is measured against (never exported)
            task.evaluate(start.state)
            history.append({"step": 0, "epoch": 0.0, "evals": task.last})
            run.log("eval before training: " + _figures(task.last))
        out = session.train(task, runner, start, stop_at)
    run.log(table(history, run.main))
    return _summary(run, out.status, out.step, history)


class EmbeddingTask:
    """The embedding kind as the engine loop's task (jaxbert.engine.task): its own train step, the
    schedule's batches, retrieval / STS evaluations, the best model exported as sentence-transformers'."""

    step = None  # the loop compiles train_step, not a StepSpec

    def __init__(self, run: _Run, model, history: list):
        r, o = run.recipe, run.options
        self.run, self.model, self.history = run, model, history
        self.apply_fn, self.total, self.log_every = model.apply, run.total, r.train.log_every
        self.per_epoch = run.training.per_epoch
        self.train_step = make_train_step(o.pooling, o.temperature, symmetric=o.symmetric,
                                          dims=tuple(o.matryoshka_dims), chunks=run.chunks,
                                          groups=run.runner.num_devices)
        self.evaluator = Evaluator(model, run.tok, run.evals, o.pooling, run.settings.prompts, run.max_length)
        scored = [h for h in history if h["step"] > 0]
        self.best = max(scored, key=lambda h: main_score(h, run.main)) if scored else None
        self.last, self._params, self._temperature = {}, None, None

    summarize = staticmethod(summarize)

    def batches(self, start: int):
        """This process's rows [1, B_host, C, L] of each step's batch from step `start` on (the schedule's)."""
        n, pid = jax.process_count(), jax.process_index()
        rows = self.run.batch // n
        buckets = bucket_lengths(self.run.max_length)
        for host, after in self.run.training.batches(start, buckets, slice(pid * rows, (pid + 1) * rows)):
            yield host, {"epoch": after // self.per_epoch, "step": after}

    def throughput(self):
        return None  # batches are cut to their bucket: no fixed tokens per step

    def stepped(self, step: int) -> None:
        pass

    def logged(self, step: int, scalars: dict) -> None:
        epoch = step / self.per_epoch
        scalars.update(epoch=round(epoch, 4), elapsed_s=round(time.time() - self.run.t0, 1))
        self.run.log(f"step {step}/{self.total} epoch {epoch:.2f} loss {scalars['loss']:.4f} "
                     f"lr {scalars['learning_rate']:.2e}")

    def eval_due(self, step: int) -> bool:
        every = self.run.recipe.train.eval_every
        return step % self.per_epoch == 0 or bool(every and step % every == 0)

    def evaluate(self, state) -> dict:
        params = host_params(self.run.runner, state)
        self._params = model_params(params)
        self._temperature = float(np.exp(-params[LOGIT_KEY])) if LOGIT_KEY in params else None
        self.last = self.evaluator(self._params)
        figures = {f"eval_{n}_{k}": v for n, ms in self.last.items() for k, v in ms.items()}
        if self._temperature is not None:
            figures["temperature"] = self._temperature
        return figures

    def evaluated(self, step: int, state, figures: dict, seconds: float) -> None:
        run = self.run
        record = {"step": step, "epoch": round(step / self.per_epoch, 4), "evals": self.last}
        if self._temperature is not None:
            record["temperature"] = self._temperature
        self.history.append(record)
        better = not run.evals or self.best is None or main_score(record, run.main) > main_score(self.best, run.main)
        run.log(f"eval at step {step}: {_figures(record['evals'])}" + (" (best so far)" if better else ""))
        if better:
            self.best = record
            if run.primary:
                write_sentence_transformers(workdir_lib.path(run.workdir, workdir_lib.BEST), run.loaded.config,
                                            run.loaded.class_name, self._params, run.tok_dir, run.settings,
                                            overwrite=True)
        if run.primary:
            write_eval_json(run.workdir, run.spec.name, run.main, self.history, self.best)

    def checkpoint_meta(self, step: int, loader_state) -> dict:
        run = self.run
        return workdir_lib.checkpoint_meta(step, [loader_state], run.recipe.to_dict(), run.loaded.config,
                                           run.loaded.class_name, task=(run.record(), self.history))


class _LearnedScale:
    """The model as the runner prepares it, its params with the learned log scale beside the encoder's."""

    def __init__(self, model, log_scale):
        self.model, self.log_scale, self.apply = model, log_scale, model.apply

    def init_boxed(self, *args, **kwargs):
        out = self.model.init_boxed(*args, **kwargs)
        if self.log_scale is None:
            return out
        return {**out, "params": {**out["params"], LOGIT_KEY: jax.numpy.asarray(self.log_scale)}}


def _figures(evals: dict) -> str:
    return "; ".join(f"{n} " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items()) for n, ms in evals.items())


def _summary(run: _Run, status: str, step: int, history: list) -> dict:
    scored = [h for h in history if h["step"] > 0]
    best = max(scored, key=lambda h: main_score(h, run.main)) if scored else None
    return {"status": status, "step": step, "total": run.total, "history": history, "best": best, "main": run.main,
            "workdir": str(run.workdir), "best_dir": str(workdir_lib.path(run.workdir, workdir_lib.BEST)),
            "wall_s": round(time.time() - run.t0, 1)}
