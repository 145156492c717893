"""Predictions and scores from a fine-tuned Hugging Face directory (WORKDIR/best, or any such model).

The class and labels come from the model's config.json (architectures, id2label, problem_type);
how training read its files (text columns, max_length, QA windows) from the ``jaxbert_task``
record written beside them. `predict_file` needs no labels in the file; `evaluate_file` reads
labelled data with the task readers and scores it with the task's metrics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jax

from jaxbert import fs
from jaxbert.convert.pretrained import from_pretrained
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.errors import InputError
from jaxbert.finetune.batching import batches
from jaxbert.finetune.featurize import make_features
from jaxbert.finetune.losses import MODEL_INPUTS, outputs
from jaxbert.finetune.metrics import KIND_METRICS
from jaxbert.finetune.model import TASK_KEY, kind_of
from jaxbert.finetune.readers import ChoiceExample, TextExample, TokenExample, read_split
from jaxbert.finetune.scoring import Collector, decode, score
from jaxbert.finetune.squad import read_squad
from jaxbert.finetune.tables import TaskDataError, cell, local_path, read_rows, require_columns
from jaxbert.model.config import BertConfig
from jaxbert.workdir import tokenizer_path


@dataclass
class FinetunedModel:
    module: object
    params: dict
    config: BertConfig
    kind: str
    labels: tuple[str, ...] | None  # class / tag names in id order
    task: dict  # the jaxbert_task record (defaults when the model has none)
    tokenizer: object

    def option(self, key: str, default):
        return self.task.get(key, default)


def load_finetuned(model_dir, kind: str | None = None, tokenizer=None) -> FinetunedModel:
    """A fine-tuned directory's module, params, kind and labels; `kind` must agree with its class."""
    path = fs.local_copy(model_dir)
    if not (path / "config.json").is_file():
        raise InputError(f"{model_dir}: no config.json; is it a fine-tuned model directory?")
    config = BertConfig.from_json_file(path / "config.json")
    found = kind_of(config)
    if kind is not None and kind != found and {kind, found} != {"classification", "regression"}:
        raise InputError(f"{model_dir} is a {found} model ({config.architectures[0]}), not {kind}")
    kind = kind or found
    tok_dir = tokenizer or tokenizer_path(model_dir)
    if tok_dir is None:
        raise InputError(f"{model_dir}: no tokenizer beside it; pass --tokenizer DIR")
    module, params = from_pretrained(str(path))
    labels = tuple(config.id2label[i] for i in range(config.num_labels)) if kind in ("classification", "tokens") else None
    return FinetunedModel(module, params, config, kind, labels, dict(config.extra.get(TASK_KEY) or {}),
                          load_tokenizer(tok_dir))


def _unlabelled(kind: str, path, task: dict, text_columns=None) -> list:
    """Examples of a file that may lack labels (gold fields are read when present, else 0)."""
    if kind == "qa":
        return read_squad(path)
    if kind == "tokens":
        p = local_path(path)
        if p.suffix.lower() in (".jsonl", ".json", ".parquet"):
            rows, lines = read_rows(path)
            require_columns(path, rows, ["tokens"])
            return [TokenExample(f"{p.name}:{n}", tuple(str(w) for w in cell(path, r, n, "tokens")),
                                 (0,) * len(cell(path, r, n, "tokens"))) for r, n in zip(rows, lines)]
        sentences, words = [], []  # CoNLL: the word is the first field; tags, if any, are ignored
        for line in p.read_text(encoding="utf-8").splitlines() + [""]:
            fields = line.split()
            if fields and fields[0] != "-DOCSTART-":
                words.append(fields[0])
            elif not fields and words:
                sentences.append(TokenExample(f"{p.name}:{len(sentences)}", tuple(words), (0,) * len(words)))
                words = []
        if not sentences:
            raise TaskDataError(f"{path} is empty")
        return sentences
    rows, lines = read_rows(path)
    name = local_path(path).name
    if kind == "choice":
        require_columns(path, rows, ["context", "endings"])
        return [ChoiceExample(f"{name}:{n}", str(cell(path, r, n, "context")),
                              tuple(str(e) for e in cell(path, r, n, "endings")), int(r.get("label", 0) or 0))
                for r, n in zip(rows, lines)]
    columns = list(text_columns or task.get("text_columns") or ["sentence"])
    require_columns(path, rows, columns)
    return [TextExample(f"{name}:{n}", str(cell(path, r, n, columns[0])),
                        str(cell(path, r, n, columns[1])) if len(columns) > 1 else None, 0)
            for r, n in zip(rows, lines)]


def run_model(m: FinetunedModel, features, batch_size: int = 32) -> dict:
    """Per-feature outputs (logits, or start / end logits), one jitted call per bucket shape."""
    kind = m.kind

    @jax.jit
    def forward(params, batch):
        out = m.module.apply({"params": params}, *(batch[k] for k in MODEL_INPUTS), deterministic=True)
        return outputs(kind, out)

    collect = Collector(len(features), features.length)
    for b in batches(features, batch_size):
        index = b.pop("index")
        collect.add(jax.device_get(forward(m.params, {k: b[k] for k in MODEL_INPUTS})), index)
    return collect.result()


def _featurize(m: FinetunedModel, examples):
    return make_features(m.kind, examples, m.tokenizer, int(m.option("max_length", 128)),
                         int(m.option("stride", 128)), int(m.option("max_query_length", 64)))


def _decode(m: FinetunedModel, out, features, windows):
    return decode(m.kind, out, features, windows, m.labels, version_2=bool(m.option("version_2", False)))


def predict_file(model_dir, path, kind: str | None = None, text_columns=None, tokenizer=None,
                 batch_size: int = 32) -> list[dict]:
    """One dict per example: classification {id, label, score}, regression {id, value},
    tokens {id, words, tags}, qa {id, answer}, choice {id, label, score}."""
    m = load_finetuned(model_dir, kind, tokenizer)
    examples = _unlabelled(m.kind, path, m.task, text_columns)
    features, windows = _featurize(m, examples)
    decoded = _decode(m, run_model(m, features, batch_size), features, windows)
    preds, scores = decoded["predictions"], decoded["scores"]
    rows = []
    for i, e in enumerate(examples):
        if m.kind == "classification":
            rows.append({"id": e.id, "label": m.labels[int(preds[i])], "score": float(scores[i])})
        elif m.kind == "choice":
            rows.append({"id": e.id, "label": int(preds[i]), "score": float(scores[i])})
        elif m.kind == "regression":
            rows.append({"id": e.id, "value": float(preds[i])})
        elif m.kind == "tokens":
            tags = preds[i] + ["O"] * (len(e.words) - len(preds[i]))
            rows.append({"id": e.id, "words": list(e.words), "tags": tags})
        else:
            rows.append({"id": e.id, "answer": preds[e.id]})
    return rows


def write_predictions(rows: list[dict], out) -> Path:
    fs.atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in rows))
    return Path(str(out))


def evaluate_file(model_dir, kind: str, path, text_columns=None, label_column=None, tokenizer=None,
                  batch_size: int = 32) -> dict:
    """The task's metrics of the model on a labelled file (labels checked against the model's)."""
    m = load_finetuned(model_dir, kind, tokenizer)
    columns = {}
    if m.kind in ("classification", "regression"):
        columns = {"text_columns": tuple(text_columns or m.option("text_columns", ["sentence"])),
                   "label_column": label_column or m.option("label_column", "label")}
    examples, _ = read_split(m.kind, path, m.labels, **columns)
    features, windows = _featurize(m, examples)
    decoded = _decode(m, run_model(m, features, batch_size), features, windows)
    names = KIND_METRICS["qa_v2" if m.kind == "qa" and m.option("version_2", False) else m.kind][0]
    out = score(m.kind, names, decoded["predictions"], examples, m.labels)
    return {k: float(v) for k, v in out.items()}


__all__ = ["FinetunedModel", "load_finetuned", "predict_file", "write_predictions", "evaluate_file", "run_model"]
