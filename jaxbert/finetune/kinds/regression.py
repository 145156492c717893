"""Regression: one or two text columns and a number per row (STS-B's similarity, a rating).

Read by readers.read_text (numeric labels), featurized by features.text_features (float32
targets), trained with the squared error of the single logit, scored by Pearson and Spearman
correlation (Pearson picks the best checkpoint), saved as ...ForSequenceClassification with one
label and problem_type regression.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from jaxbert.finetune.features import text_features
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.kinds.classification import sequence_problem_type, text_inputs
from jaxbert.finetune.readers import read_text


class Regression(Kind):
    name = "regression"
    head = "ForSequenceClassification"
    problem_type = "regression"
    reads_columns = True
    metric_names = ("pearson", "spearman")
    main_metric = "pearson"

    def read_file(self, path, labels, labelled, table):
        return read_text(path, table.get("text_columns", ("sentence",)), table.get("label_column", "label"),
                         labels, table.get("columns"), labelled, table.get("values"), numeric=True)

    def make_features(self, examples, tok, max_length, options, labels):
        return text_features(examples, tok, max_length, regression=True), None

    def sums(self, out, batch: dict) -> dict:
        w = self.weights(batch)
        err = out.logits.astype(jnp.float32)[..., 0] - batch["labels"].astype(jnp.float32)
        return {"loss_sum": jnp.sum(err * err * w), "weight": jnp.sum(w)}

    def decode_outputs(self, outputs, features, windows, labels, options) -> dict:
        return {"predictions": outputs["logits"][:, 0].astype(np.float64), "scores": None}

    def id2label(self, labels) -> dict[int, str]:
        return {0: "LABEL_0"}

    def problem_type_of(self, config) -> str | None:
        return sequence_problem_type(config)

    def inputs(self, example, columns: dict) -> dict:
        return text_inputs(example, columns)

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"value": float(decoded["predictions"][i])}


KIND = Regression()
