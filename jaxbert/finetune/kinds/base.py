"""The `Kind` protocol: everything about a fine-tuning task kind that differs from one kind to another.

A kind is one object (one module under jaxbert/finetune/kinds/, registered in KINDS): how its
files are read and its labels named, how examples become arrays, its loss sums and their
weights, what evaluation keeps of the model's output, how that output becomes predictions and
scores, the transformers head it trains and how a saved config is recognised as its own, and
what `jaxbert predict` writes per example. The rest of the package asks the kind; it never
branches on the kind's name. `Kind` holds the defaults most kinds share (a classifier's: the
logits kept, cross-entropy over classes, the argmax decoded); a kind overrides what is its own.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxbert.finetune.losses import class_sums, logits_output, valid_weights
from jaxbert.finetune.metrics import compute
from jaxbert.finetune.scoring import class_predictions

# Keys of a prediction row; an input column of the same name is written as input_<name>.
OUTPUT_KEYS = ("id", "label", "score", "value", "words", "tags", "answer", "empty_words", "question", "context",
               "endings")


class Kind:
    """A task kind. Attributes:

      name:           the registry key and the --task spelling
      head:           the transformers class suffix of its head ("ForSequenceClassification")
      problem_type:   config.json's problem_type for the head (None: none written)
      named_labels:   the data names its classes / tags, kept in id2label (else id2label is fixed)
      reads_columns:  its reader takes text_columns / label_column (a table of texts and a label)
      recipe:         the shipped recipe it trains with by default
      metric_names:   the metrics scored on every eval set; main_metric picks the best checkpoint
    """

    name: str = ""
    head: str = ""
    problem_type: str | None = None
    named_labels: bool = False
    reads_columns: bool = False
    recipe: str = "finetune-glue"
    metric_names: tuple[str, ...] = ()
    main_metric: str = ""

    def __repr__(self) -> str:
        return f"<task kind {self.name}>"

    # -- reading ---------------------------------------------------------------------------
    def read(self, path, labels: Sequence[str] | None = None, *, labelled: bool = True, version_2: bool = True,
             text_columns: Sequence[str] = ("sentence",), label_column: str = "label",
             columns: Sequence[str] | None = None, values: Sequence[str] | None = None):
        """(examples, labels) of one file; labels None where the kind names none. labelled=False
        reads a file to predict on (labels may be absent; those present are checked)."""
        raise NotImplementedError

    def check_labels(self, path, labels) -> None:
        """Refuses a training file's label set the kind cannot train on (TaskDataError)."""

    # -- arrays ----------------------------------------------------------------------------
    def featurize(self, examples, tok, max_length: int, stride: int = 128, max_query_length: int = 64):
        """(Features, windows): windows is what decoding needs beyond the features (QA's), else None."""
        raise NotImplementedError

    def truncation(self, max_length: int) -> str:
        """How the run's log names the rows featurize cut."""
        return f"rows cut to {max_length} tokens"

    # -- the objective (traced inside the train and eval steps) ----------------------------
    def weights(self, batch: dict):
        """The loss weight of every target: valid [..., B] by default."""
        return valid_weights(batch)

    def sums(self, out, batch: dict) -> dict:
        """{loss_sum, weight[, correct]} for one batch [B, ...] of model output; by default the
        cross-entropy of logits [B, K] against class ids labels [B]."""
        return class_sums(out.logits, batch["labels"], self.weights(batch))

    def outputs(self, out) -> dict:
        """What evaluation and prediction keep per row of the model's output (float32): the logits by default."""
        return logits_output(out)

    # -- scoring ---------------------------------------------------------------------------
    def metrics(self, version_2: bool = False) -> tuple[tuple[str, ...], str]:
        """(metric names for metrics.compute, the metric key that picks the best checkpoint)."""
        return self.metric_names, self.main_metric

    def decode(self, outputs: dict, features, windows=None, labels: Sequence[str] | None = None, n_best: int = 20,
               max_answer_length: int = 30, version_2: bool = False) -> dict:
        """{"predictions": one per example, "scores": per example or None[, more the kind keeps]};
        by default the argmax class and its softmax probability."""
        return class_predictions(outputs["logits"])

    def references(self, examples: list, labels: Sequence[str] | None = None):
        """Gold labels in the form metrics.compute takes for the kind."""
        return np.array([e.label for e in examples])

    def score(self, metric_names: Sequence[str], predictions, examples: list,
              labels: Sequence[str] | None = None) -> dict:
        """The named metrics of one eval set's predictions against its examples' gold labels."""
        return self.score_against(metric_names, predictions, self.references(examples, labels))

    def score_against(self, metric_names: Sequence[str], predictions, references) -> dict:
        """The named metrics of predictions against references (metrics.compute)."""
        return compute(metric_names, predictions, references)

    # -- the transformers head -------------------------------------------------------------
    def id2label(self, labels: Sequence[str] | None) -> dict[int, str]:
        """config.json's id2label for the task's labels."""
        if self.named_labels:
            return {i: str(name) for i, name in enumerate(labels)}
        return {0: "LABEL_0", 1: "LABEL_1"}

    def recognises(self, config) -> bool:
        """Whether a fine-tuned model's config (its architectures, problem_type) is this kind's head."""
        return (config.architectures or [""])[0].endswith(self.head)

    def labels_of(self, config) -> tuple[str, ...] | None:
        """The class / tag names a fine-tuned config carries (None where the kind names none)."""
        if not self.named_labels:
            return None
        return tuple(config.id2label[i] for i in range(config.num_labels))

    # -- predict's rows ---------------------------------------------------------------------
    def inputs(self, example, columns: dict) -> dict:
        """What a prediction row repeats of its input example."""
        raise NotImplementedError

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        """Example i's prediction, as `jaxbert predict` writes it beside the input."""
        raise NotImplementedError
