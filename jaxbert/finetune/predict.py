"""Predictions and scores from a fine-tuned Hugging Face directory (WORKDIR/best, or any such model).

The kind, class and labels come from the model's config.json (architectures, problem_type,
id2label); how training read its files and decoded (text columns, max_length, the kind's
options: QA's windows, n_best, max_answer_length, version_2) from the ``jaxbert_task`` record
written beside them. Both verbs read files with the task readers training uses (the
same checks; a GLUE model's files as its preset reads them): `predict_file` needs no labels
in the file, `evaluate_file` reads labelled data and scores it with the task's metrics. The
model's head decides the task; the data file is read and checked before the weights load.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import jax

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.convert.pretrained import from_pretrained
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.errors import InputError
from jaxbert.finetune import kinds
from jaxbert.finetune.batching import batches, buckets_for
from jaxbert.finetune.features import special_id
from jaxbert.finetune.glue import glue_task, headerless
from jaxbert.finetune.kinds import Kind
from jaxbert.finetune.losses import MODEL_INPUTS
from jaxbert.finetune.model import OPTIONS_KEY, TASK_KEY, kind_of
from jaxbert.finetune.eval_outputs import Collector
from jaxbert.finetune.row_files import local_path
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.configs import read_config
from jaxbert.workdir import tokenizer_path


@dataclass
class FinetunedModel:
    module: object | None  # None until load_weights
    params: dict | None
    config: BertConfig
    kind: Kind  # the registered kind whose head and problem_type the config matches
    labels: tuple[str, ...] | None  # class / tag names in id order
    task: dict  # the jaxbert_task record (defaults when the model has none)
    tokenizer: object
    path: str = ""

    def option(self, key: str, default):
        return self.task.get(key, default)

    @property
    def options(self):
        """The kind's options training used (the record's; an older record's flat keys; else the kind's defaults)."""
        saved = self.task.get(OPTIONS_KEY)
        if saved is None:  # exported before options were typed: QA's windows and version_2 beside max_length
            own = {f.name for f in dataclasses.fields(self.kind.Options)}
            saved = {k: v for k, v in self.task.items() if k in own}
        return self.kind.options(saved, f"{self.path}: config.json {TASK_KEY}.{OPTIONS_KEY}.")

    @property
    def task_kind(self) -> Kind:
        """The model's Kind (the same object as `kind`)."""
        return self.kind

    def load_weights(self) -> "FinetunedModel":
        if self.module is None:
            self.module, self.params = from_pretrained(str(fs.local_copy(self.path)))
        return self


def load_finetuned(model_dir, kind: Kind | str | None = None, tokenizer=None, weights: bool = True) -> FinetunedModel:
    """A fine-tuned directory's config, kind, labels and tokenizer (and, with weights, module and params).

    The head in config.json decides the task: a `kind` that contradicts it is refused, before
    the weights load. A tokenizer that lacks [CLS] / [SEP] / [PAD] or has more tokens than the
    model's vocabulary is refused too.
    """
    if not fs.as_path(model_dir).exists():
        raise InputError(f"model not found: {model_dir} does not exist")
    if workdir_lib.kind(model_dir) == workdir_lib.FINETUNING:  # a fine-tuning workdir: its best model
        model_dir = workdir_lib.path(model_dir, workdir_lib.BEST)
        if not model_dir.exists():
            raise InputError(f"{model_dir}: not written yet (a fine-tuning workdir exports its best model at its "
                             f"first evaluation)")
    path = fs.local_copy(model_dir)
    if not (path / "config.json").is_file():
        raise InputError(f"{model_dir}: no config.json; is it a fine-tuned model directory?")
    config = read_config(path / "config.json")  # its family's config class
    found = kind_of(config)
    if kind is not None and kinds.resolve(kind) is not found:
        raise InputError(f"--task {kind}: {model_dir} has a {found.name} head ({config.architectures[0]}, "
                         f"{config.num_labels} output(s)); its head decides the task: leave --task out")
    tok_dir = tokenizer or tokenizer_path(model_dir)
    if tok_dir is None:
        raise InputError(f"{model_dir}: no tokenizer beside it; pass --tokenizer DIR")
    tok = load_tokenizer(tok_dir)
    for role in ("cls", "sep", "pad"):
        special_id(tok, role)  # a TokenizerError naming the missing token
    if tok.get_vocab_size() > config.vocab_size:
        raise InputError(f"{tok_dir}: its vocabulary ({tok.get_vocab_size()}) is larger than {model_dir}'s "
                         f"({config.vocab_size}); is it the model's tokenizer?")
    labels = found.labels_of(config)
    m = FinetunedModel(None, None, config, found, labels, dict(config.extra.get(TASK_KEY) or {}), tok, str(model_dir))
    return m.load_weights() if weights else m


def read_columns(m: FinetunedModel, path, text_columns=None, label_column=None) -> dict:
    """How to read a file for the model, as training read its files: text / label columns, and
    for a GLUE model the preset's (CoLA's headerless train / dev files, 0 / 1 for named classes)."""
    if not m.kind.reads_columns:
        return {}
    preset = glue_task(m.task["glue"]) if m.task.get("glue") else None
    out = {"text_columns": tuple(text_columns or m.option("text_columns", None) or ["sentence"]),
           "label_column": label_column or m.option("label_column", "label")}
    if preset is not None:
        if preset.values is not None and m.labels == preset.labels:
            out["values"] = preset.values
        if fs.as_path(path).exists() and local_path(path).is_file() and headerless(preset, path):
            out["columns"] = preset.columns
    return out


def read_examples(m: FinetunedModel, path, labelled: bool, text_columns=None, label_column=None) -> list:
    """The file's examples, read by the task's reader with training's checks; labelled=False
    (predict) lets labels be absent, and checks those present."""
    examples, _ = m.kind.read(path, m.labels, labelled=labelled,
                              table=read_columns(m, path, text_columns, label_column))
    if labelled:
        m.kind.check_scorable(path, examples, m.options)
    return examples


def run_model(m: FinetunedModel, features, batch_size: int = 32) -> dict:
    """Per-feature outputs (logits, or start / end logits), one jitted call per bucket shape."""
    outputs = m.kind.outputs
    # pooled heads: the last layer at [CLS] alone (ModelOptions.first_token_only; other heads ignore it)
    module = m.module.clone(options=m.module.options.replace(first_token_only=True))

    @jax.jit
    def forward(params, batch):
        out = module.apply({"params": params}, *(batch[k] for k in MODEL_INPUTS), deterministic=True)
        return outputs(out)

    collect = Collector(len(features), features.length)
    for b in batches(features, batch_size, buckets=buckets_for(features, batch_size)):
        index = b.pop("index")
        collect.add(jax.device_get(forward(m.params, {k: b[k] for k in MODEL_INPUTS})), index)
    return collect.result()


def _featurize(m: FinetunedModel, examples):
    return m.kind.featurize(examples, m.tokenizer, int(m.option("max_length", 128)), m.options, m.labels)


def _decode(m: FinetunedModel, out, features, windows):
    return m.kind.decode(out, features, windows, m.labels, m.options)


def predict_file(model_dir, path, kind: Kind | str | None = None, text_columns=None, tokenizer=None,
                 batch_size: int = 32) -> list[dict]:
    """One dict per example, its input beside the prediction: classification {id, <text columns>,
    label, score}, regression {id, <text columns>, value}, tokens {id, words, tags[, empty_words]},
    qa {id, question, context, answer}, choice {id, context, endings, label, score}.

    empty_words lists the words the tokenizer reduced to nothing, tagged "O" (the model never saw them).
    """
    m = load_finetuned(model_dir, kind, tokenizer, weights=False)
    columns = read_columns(m, path, text_columns)
    examples = read_examples(m, path, labelled=False, text_columns=text_columns)
    features, windows = _featurize(m, examples)
    m.load_weights()
    decoded = _decode(m, run_model(m, features, batch_size), features, windows)
    k = m.kind
    return [{"id": e.id, **k.inputs(e, columns), **k.prediction(i, e, decoded, m.labels)}
            for i, e in enumerate(examples)]


def write_predictions(rows: list[dict], out) -> Path:
    fs.atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in rows))
    return Path(str(out))


def evaluate_file(model_dir, kind: Kind | str | None, path, text_columns=None, label_column=None, tokenizer=None,
                  batch_size: int = 32, log=None) -> dict:
    """The task's metrics of the model on a labelled file (labels checked against the model's).

    kind None: the model's head decides; a kind that contradicts it is refused. log (when given)
    hears about words without word pieces, tagged "O".
    """
    m = load_finetuned(model_dir, kind, tokenizer, weights=False)
    examples = read_examples(m, path, labelled=True, text_columns=text_columns, label_column=label_column)
    features, windows = _featurize(m, examples)
    m.load_weights()
    decoded = _decode(m, run_model(m, features, batch_size), features, windows)
    empty = decoded.get("empty_words") or []
    if log is not None and any(empty):
        log(f"note: {sum(map(len, empty))} word(s) in {sum(map(bool, empty))} sentence(s) of {path} have no "
            f"word pieces (e.g. a soft hyphen, a zero-width space, a byte-order mark, \"\"): tagged O")
    names = m.kind.metrics(m.options)[0]
    if m.task.get("glue"):  # a GLUE model is scored as its leaderboard scores it (CoLA: mcc)
        names = glue_task(m.task["glue"]).metrics
    out = m.kind.score(names, decoded["predictions"], examples, m.labels)
    return {k: float(v) for k, v in out.items()}


__all__ = ["FinetunedModel", "load_finetuned", "predict_file", "write_predictions", "evaluate_file", "run_model",
           "read_examples"]
