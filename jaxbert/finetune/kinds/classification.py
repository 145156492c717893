"""Sequence classification: one or two text columns and a class label per row.

Read by readers.read_text (class names from the training file, or given), featurized by
features.text_features, trained with cross-entropy over the [B, K] logits, scored by accuracy
and macro F1 (accuracy picks the best checkpoint), saved as ...ForSequenceClassification with
problem_type single_label_classification and the class names in id2label. Regression reads
the same tables: `text_inputs` and `regresses` are shared with it.
"""

from __future__ import annotations

from typing import Sequence

from jaxbert.finetune.features import text_features
from jaxbert.finetune.kinds.base import OUTPUT_KEYS, Kind
from jaxbert.finetune.readers import read_text
from jaxbert.finetune.tables import TaskDataError


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

    def read(self, path, labels=None, *, labelled=True, version_2=True, text_columns=("sentence",),
             label_column="label", columns=None, values=None):
        return read_text(path, text_columns, label_column, labels, columns, labelled, values)

    def check_labels(self, path, labels) -> None:
        if len(labels) < 2:
            raise TaskDataError(f"{path}: {self.name} needs at least 2 labels, found {list(labels)}")

    def featurize(self, examples, tok, max_length, stride=128, max_query_length=64):
        return text_features(examples, tok, max_length), None

    def recognises(self, config) -> bool:
        return super().recognises(config) and not regresses(config)

    def inputs(self, example, columns: dict) -> dict:
        return text_inputs(example, columns)

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"label": labels[int(decoded["predictions"][i])], "score": float(decoded["scores"][i])}


def regresses(config) -> bool:
    """A ...ForSequenceClassification config that regresses: problem_type regression, or one output.
    problem_type is a field of a family's own config class (ModernBertConfig), else in BertConfig's extra."""
    problem_type = getattr(config, "problem_type", None) or config.extra.get("problem_type")
    return problem_type == "regression" or config.num_labels == 1


KIND = Classification()
