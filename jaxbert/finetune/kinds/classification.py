"""Sequence classification: one or two text columns and a class label per row.

Read by readers.read_text (class names from the training file, or given), featurized by
features.text_features, trained with cross-entropy over the [B, K] logits, scored by accuracy
and macro F1 (accuracy picks the best checkpoint), saved as ...ForSequenceClassification with
problem_type single_label_classification and the class names in id2label. Regression reads
the same tables and saves the same head: `text_inputs` and `sequence_problem_type` are shared with it.
"""

from __future__ import annotations

from typing import Sequence

from jaxbert.finetune.features import text_features
from jaxbert.finetune.kinds.base import OUTPUT_KEYS, Kind, problem_type
from jaxbert.finetune.readers import read_text
from jaxbert.finetune.row_files import TaskDataError


def text_inputs(example, columns: dict) -> dict:
    """A text row's input under the file's own column names (input_<name> where a name is an output key)."""
    names = columns["text_columns"]
    texts = [example.text_a] + ([example.text_b] if len(names) > 1 else [])
    return {(c if c not in OUTPUT_KEYS else f"input_{c}"): t for c, t in zip(names, texts)}


class Classification(Kind):
    name = "classification"
    head = "ForSequenceClassification"
    problem_type = "single_label_classification"
    named_labels = True
    reads_columns = True
    metric_names = ("accuracy", "macro_f1")
    main_metric = "accuracy"

    def read_file(self, path, labels, labelled, table):
        return read_text(path, table.get("text_columns", ("sentence",)), table.get("label_column", "label"),
                         labels, table.get("columns"), labelled, table.get("values"))

    def check_labels(self, path, labels) -> None:
        if len(labels) < 2:
            raise TaskDataError(f"{path}: {self.name} needs at least 2 labels, found {list(labels)}")

    def make_features(self, examples, tok, max_length, options, labels):
        return text_features(examples, tok, max_length), None

    def problem_type_of(self, config) -> str | None:
        return sequence_problem_type(config)

    def inputs(self, example, columns: dict) -> dict:
        return text_inputs(example, columns)

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"label": labels[int(decoded["predictions"][i])], "score": float(decoded["scores"][i])}


def sequence_problem_type(config) -> str | None:
    """A ...ForSequenceClassification config's problem_type; where it writes none, what transformers
    takes it for: regression for one output, else single-label classification (transformers can
    tell multi-label only from the labels' dtype at training time, so that one is always written)."""
    written = problem_type(config)
    if written is not None:
        return written
    return "regression" if config.num_labels == 1 else "single_label_classification"


KIND = Classification()
