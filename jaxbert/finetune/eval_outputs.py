"""Evaluation outputs: the model's per-row outputs gathered back per feature, and the class decode the
classifying kinds share.

`Collector` puts the rows of evaluation batches back in feature order (a batch's `index`
says where each row goes; padding rows have -1). Each kind (jaxbert.finetune.kinds) turns
the gathered outputs into one prediction per example (its `decode`) and scores them (its
`score`); `class_predictions` is the classifying kinds' decode.
"""

from __future__ import annotations

import numpy as np


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


def class_predictions(logits: np.ndarray) -> dict:
    """{"predictions": the argmax class (ending) ids [N], "scores": their softmax probability [N]}."""
    probs = softmax(logits.astype(np.float64))
    return {"predictions": probs.argmax(-1), "scores": probs.max(-1)}
