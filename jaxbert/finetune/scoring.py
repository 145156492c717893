"""Model outputs -> predictions per example -> scores, for every task kind.

`Collector` puts the rows of evaluation batches back in feature order (a batch's `index`
says where each row goes; padding rows have -1). `decode` turns the outputs of every
feature into one prediction per example; `score` compares predictions with the examples'
gold labels through jaxbert.finetune.metrics.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxbert.finetune.features import EMPTY_WORD_TAG, IGNORE, Features
from jaxbert.finetune.metrics import compute
from jaxbert.finetune.qa_features import QAWindows, postprocess_qa
from jaxbert.finetune.squad import gold_answers


class Collector:
    """Per-row outputs of N features gathered from batches; sequence outputs padded to the features' L."""

    def __init__(self, n: int, length: int):
        self.n, self.length, self.arrays = n, length, {}

    def add(self, outputs: dict, index: np.ndarray) -> None:
        keep = index >= 0
        for key, value in outputs.items():
            value = np.asarray(value)[keep]
            if key in ("start_logits", "end_logits") or (value.ndim == 3):  # [B, L(, K)]: pad to L
                pad = [(0, 0), (0, self.length - value.shape[1])] + [(0, 0)] * (value.ndim - 2)
                value = np.pad(value, pad, constant_values=-1e4)
            if key not in self.arrays:
                self.arrays[key] = np.zeros((self.n, *value.shape[1:]), value.dtype)
            self.arrays[key][index[keep]] = value

    def result(self) -> dict:
        return self.arrays


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def decode(kind: str, outputs: dict, features: Features, windows: QAWindows | None = None,
           labels: Sequence[str] | None = None, n_best: int = 20, max_answer_length: int = 30,
           version_2: bool = False) -> dict:
    """{"predictions": per example, "scores": per example or None}.

    classification / choice: class (ending) ids and their softmax probability; regression: the
    value; qa: question id -> answer; tokens: one tag name per word of every sentence, aligned by
    word ids (a word in several windows takes the window where it sits furthest from an edge),
    "O" (EMPTY_WORD_TAG) for a word without word pieces, and "empty_words": per sentence the
    indices of those words.
    """
    if kind == "qa":
        answers = postprocess_qa(outputs["start_logits"], outputs["end_logits"], windows, n_best,
                                 max_answer_length, version_2)
        return {"predictions": answers, "scores": None}
    logits = outputs["logits"]
    if kind == "regression":
        return {"predictions": logits[:, 0].astype(np.float64), "scores": None}
    if kind == "tokens":
        return _decode_tags(logits, features, labels)
    probs = softmax(logits.astype(np.float64))
    return {"predictions": probs.argmax(-1), "scores": probs.max(-1)}


def _decode_tags(logits, features: Features, labels: Sequence[str]) -> dict:
    ids = logits.argmax(-1)
    if features.word_index is None:  # one row per sentence, tags on first pieces (features built elsewhere)
        word_starts = features.arrays["labels"] != IGNORE
        return {"predictions": [[labels[t] for t in ids[i][word_starts[i]]] for i in range(len(features))],
                "scores": None}
    best: list[dict[int, tuple[int, int]]] = [{} for _ in range(len(features.n_words))]
    for row in range(len(features)):
        k, n = int(features.example_index[row]), int(features.lengths[row])
        for t in np.flatnonzero(features.word_index[row] >= 0):
            word, margin = int(features.word_index[row, t]), min(int(t), n - 1 - int(t))
            if word not in best[k] or margin > best[k][word][0]:
                best[k][word] = (margin, int(ids[row, t]))
    tags, empty = [], []
    for k, n_words in enumerate(features.n_words.tolist()):
        tags.append([labels[best[k][w][1]] if w in best[k] else EMPTY_WORD_TAG for w in range(n_words)])
        empty.append([w for w in range(n_words) if w not in best[k]])
    return {"predictions": tags, "scores": None, "empty_words": empty}


def references(kind: str, examples: list, labels: Sequence[str] | None = None):
    """Gold labels in the form metrics.compute takes for the kind."""
    if kind == "qa":
        return gold_answers(examples)
    if kind == "tokens":
        return [[labels[t] for t in e.tags] for e in examples]
    return np.array([e.label for e in examples])


def score(kind: str, metric_names: Sequence[str], predictions, examples: list,
          labels: Sequence[str] | None = None) -> dict:
    """metrics.compute over one eval set; tag lists are padded with "O" where truncation cut words."""
    gold = references(kind, examples, labels)
    if kind == "tokens":
        predictions = [p + ["O"] * (len(g) - len(p)) for p, g in zip(predictions, gold)]
    return compute(metric_names, predictions, gold)
