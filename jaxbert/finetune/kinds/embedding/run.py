"""`jaxbert finetune --task embedding`: contrastive training of SRC's bare encoder on the mesh runner.

The data (rows of anchor, positive, hard negatives), SRC, its tokenizer and the recipe are read and
checked before the workdir is made: the kind's options against the model and batch
(kinds.embedding.check_run: Matryoshka dims, mini_batch_size, no accumulation), the strategy (mesh:
every anchor scores every candidate of the global batch). Each epoch's rows are shuffled from
(seed, epoch); the last rows that do not fill a batch are left out of that epoch, so every step's
negatives are a full global batch (the log says how many). Each batch is cut to the bucket length
of its longest text. The step is jaxbert.finetune.kinds.embedding.step's (GradCache with
mini_batch_size). At each epoch end, every train.eval_every steps and at the end, each eval file is
scored by retrieval (also before the first step; its anchors against the pooled corpus of its positives and negatives,
jaxbert.finetune.kinds.embedding.metrics); the best nDCG@10 is exported to WORKDIR/best as a
sentence-transformers directory, and WORKDIR/eval.json lists every evaluation (and the temperature
where it is learned: log(1 / temperature) is a param beside the encoder's). This trainer keeps
no checkpoints: an interrupted run starts over.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import jax
import numpy as np

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.engine import parallel
from jaxbert.engine.recipe import RecipeError
from jaxbert.engine.session import prepare_runner
from jaxbert.errors import InputError
from jaxbert.finetune.kinds.embedding.export import (
    Settings,
    encode,
    write_sentence_transformers,
)
from jaxbert.finetune.kinds.embedding.metrics import pooled_corpus, retrieval
from jaxbert.finetune.kinds.embedding.step import LOGIT_KEY, make_train_step, model_params
from jaxbert.finetune.features import bucket_for, bucket_lengths
from jaxbert.finetune.kinds.embedding import check_run, negatives_line
from jaxbert.finetune.model import load_task_model, source_config
from jaxbert.finetune.task_data import read_task_data
from jaxbert.model.classes import build_model, dummy_inputs

MAIN = "ndcg@10"


def train_embedding(recipe, spec, source, workdir, tokenizer=None, stop_at: int | None = None, log=print) -> dict:
    """Trains and exports; returns the summary `jaxbert finetune` prints (status, step, total, best, ...)."""
    t0 = time.time()
    _refuse_a_run_it_would_overwrite(workdir)
    kind = spec.kind
    options = recipe.options_for(kind)
    data = read_task_data(spec, options)
    tok_dir = tokenizer if tokenizer is not None else workdir_lib.tokenizer_path(source)
    if tok_dir is None:
        raise InputError(f"{source}: no tokenizer beside it (tokenizer.json, vocab.txt or spm.model); pass --tokenizer DIR")
    tok = load_tokenizer(tok_dir)
    own = source_config(source)
    r = recipe
    max_length = min(r.data.max_length, int(own.max_position_embeddings))
    runner = parallel.make_runner(r.parallel)
    if runner.strategy != "mesh":
        raise RecipeError("parallel.strategy: the embedding kind trains on mesh, where every anchor scores every "
                          "candidate of the global batch")
    batch = parallel.global_batch_size(r, runner)
    chunks = check_run(options, int(own.hidden_size), batch, r.train.accum_steps, runner.num_devices)
    train = kind.featurize(data.train, tok, max_length, options)[0]
    if len(train) < batch:
        raise InputError(f"{spec.train}: {len(train)} rows, fewer than one global batch of {batch}")
    per_epoch = len(train) // batch
    total = r.train.steps or max(1, math.ceil(r.train.epochs * per_epoch))
    info = {"kind": kind.name, "text_columns": list(spec.text_columns), "max_length": max_length,
            "options": kind.options_record(options)}
    loaded = load_task_model(source, kind, None, dtype=r.model.param_dtype, seed=r.train.seed, task_info=info)
    log(loaded.describe(source))
    columns = train.arrays["input_ids"].shape[1]
    log(negatives_line(options, batch, columns, chunks))
    workdir = fs.as_path(workdir)
    with workdir_lib.claimed(workdir, workdir_lib.FINETUNING, active=True):
        model = build_model(loaded.class_name, loaded.config, r.model.options())
        start = dict(loaded.params)
        if options.learn_temperature:  # log(1 / temperature) trained beside the encoder's params
            start[LOGIT_KEY] = np.asarray(math.log(1.0 / options.temperature), np.float32)
        prepare_runner(runner, _LearnedScale(model, start.get(LOGIT_KEY)), r.optim, total, r.train.seed,
                       dummy_inputs(loaded.class_name, 1, 8), r.train.norm_metrics)
        state = runner.create_state(runner.place_params(start))
        step_fn = runner.compile_train(make_train_step(options.pooling, options.temperature,
                                                       symmetric=options.symmetric,
                                                       dims=tuple(options.matryoshka_dims), chunks=chunks,
                                                       groups=runner.num_devices))
        settings = Settings(options.pooling, True, {k: v for k, v in options.prefixes.items()}, max_length)
        evals = {name: examples for name, examples in data.evals.items()}
        history, best, step = [], None, 0
        buckets = bucket_lengths(max_length)
        rng = jax.random.key(r.train.seed)
        stop = total if stop_at is None else min(total, stop_at)
        if evals:  # SRC as it came: the figures training is measured against (never exported as best)
            params = _encoder(runner, state)
            history.append({"step": 0, "evals": {n: _score(model, params, tok, ex, settings) for n, ex in evals.items()}})
            log("eval before training: " + "; ".join(f"{n} " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items())
                                                    for n, ms in history[0]["evals"].items()))
        while step < stop:
            epoch = step // per_epoch
            order = np.random.default_rng([r.train.seed, epoch]).permutation(len(train))
            for b in range(step - epoch * per_epoch, per_epoch):
                rows = order[b * batch:(b + 1) * batch]
                length = bucket_for(int(train.lengths[rows].max()), buckets)
                host = {k: v[rows][..., :length][None] for k, v in train.arrays.items() if k != "labels"}
                host["valid"] = np.ones((1, batch), np.int32)
                state, metrics = step_fn(state, runner.shard_batch(host), rng)
                step += 1
                m = runner.metrics_to_host(metrics)
                if not m["finite"]:
                    raise InputError(f"step {step}: the loss or a gradient is not finite; lower optim.learning_rate")
                if step % r.train.log_every == 0 or step == stop:
                    log(f"step {step}/{total} epoch {step / per_epoch:.2f} loss {m['loss_sum'] / m['weight']:.4f} "
                        f"lr {m['learning_rate']:.2e}")
                due = step % per_epoch == 0 or step == stop or (r.train.eval_every and step % r.train.eval_every == 0)
                if due and evals:
                    params = _encoder(runner, state)
                    record = {"step": step, "evals": {n: _score(model, params, tok, ex, settings)
                                                      for n, ex in evals.items()}}
                    if options.learn_temperature:
                        record["temperature"] = float(np.exp(-jax.device_get(state.params[LOGIT_KEY])))
                    history.append(record)
                    name = next(iter(evals))
                    better = best is None or record["evals"][name][MAIN] > best["evals"][name][MAIN]
                    log(f"eval at step {step}: " + "; ".join(f"{n} " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items())
                                                            for n, ms in record["evals"].items())
                        + (" (best so far)" if better else ""))
                    if better:
                        best = record
                        write_sentence_transformers(workdir_lib.path(workdir, workdir_lib.BEST), loaded.config,
                                                    loaded.class_name, params, tok_dir, settings, overwrite=True)
                if step >= stop:
                    break
        if not evals:
            write_sentence_transformers(workdir_lib.path(workdir, workdir_lib.BEST), loaded.config, loaded.class_name,
                                        _encoder(runner, state), tok_dir, settings, overwrite=True)
        _write_json(Path(str(workdir_lib.path(workdir, workdir_lib.EVAL))), {"main": MAIN, "history": history, "best": best})
    status = "finished" if step >= total else "stopped"
    return {"status": status, "step": step, "total": total, "history": history, "best": best,
            "main": (next(iter(evals), "train"), MAIN), "workdir": str(workdir),
            "best_dir": str(workdir_lib.path(workdir, workdir_lib.BEST)), "wall_s": round(time.time() - t0, 1)}


def _refuse_a_run_it_would_overwrite(workdir) -> None:
    """This trainer keeps no checkpoints, so it cannot resume: a workdir already holding a run's best/ or
    eval.json would be started over and its best/ overwritten; refused (exit code 2) until it resumes."""
    held = [n for n in (workdir_lib.BEST, workdir_lib.EVAL) if workdir_lib.path(workdir, n).exists()]
    if held:
        raise InputError(f"--workdir {workdir}: already holds a fine-tuning run ({' and '.join(held)}); an "
                         "embedding run keeps no checkpoints and cannot resume it, and would overwrite its "
                         "best model: use a new --workdir")


class _LearnedScale:
    """The model as the runner prepares it, its params with the learned log scale beside the encoder's."""

    def __init__(self, model, log_scale):
        self.model, self.log_scale, self.apply = model, log_scale, model.apply

    def init_boxed(self, *args, **kwargs):
        out = self.model.init_boxed(*args, **kwargs)
        if self.log_scale is None:
            return out
        return {**out, "params": {**out["params"], LOGIT_KEY: jax.numpy.asarray(self.log_scale)}}


def _encoder(runner, state) -> dict:
    """The encoder's params on the host (a learned temperature left out)."""
    return model_params(jax.device_get(runner.params_of(state)))


def _score(model, params, tok, examples, settings: Settings) -> dict:
    """Retrieval of one eval file: each anchor against the pooled corpus of every positive and negative."""
    rows = [e.texts for e in examples]
    corpus, relevant = pooled_corpus(rows)
    cols = examples[0].columns
    q = encode(model, params, tok, [row[0] for row in rows], settings, settings.prompts.get(cols[0], ""))
    d = encode(model, params, tok, corpus, settings, settings.prompts.get(cols[1], ""))
    return retrieval(q, d, relevant)


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
