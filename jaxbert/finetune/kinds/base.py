"""The `Kind` protocol: everything about a fine-tuning task kind that differs from one kind to another.

A kind is one object (one module, or one folder, under jaxbert/finetune/kinds/, registered in
KINDS). It implements how its files are read and its labels named (`read_file`, `check_labels`,
`check_scorable`), how examples become arrays (`make_features`), its loss sums and their weights,
what evaluation keeps of the model's output, how that output becomes predictions and scores
(`decode_outputs`, `metrics`, `score`), the transformers head it trains and how a saved config
is recognised as its own (`head` + `problem_type`, exactly), what `jaxbert predict` writes per
example, and its options: `Options`, a typed dataclass (QA's windows and decoding, a tagger's
stride) that the recipe's `kinds.<name>` section sets and the exported model's task record
keeps, so `jaxbert evaluate` / `predict` read, cut and decode as training did. The rest of the
package asks the kind; it never branches on the kind's name, and the resolved Kind object
travels (a TaskSpec, a FinetunedModel hold it), not its name. `Kind` holds the defaults most
kinds share (a classifier's: the logits kept, cross-entropy over classes, the argmax decoded);
a kind overrides what is its own.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from jaxbert.engine.recipe import build
from jaxbert.finetune.losses import class_sums, logits_output, valid_weights
from jaxbert.finetune.metrics import compute
from jaxbert.finetune.eval_outputs import class_predictions

# Keys of a prediction row; an input column of the same name is written as input_<name>.
OUTPUT_KEYS = ("id", "label", "score", "value", "words", "tags", "answer", "empty_words", "question", "context",
               "endings")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a kind that has none of its own."""

    def check(self, prefix: str = "") -> None:
        pass


_COLUMNS = ("text_columns", "label_column", "columns", "values")


class Kind:
    """A task kind. Attributes:

      name:           the registry key and the --task spelling
      head:           the transformers class suffix of its head ("ForSequenceClassification")
      problem_type:   config.json's problem_type for the head (None: none written)
      named_labels:   the data names its classes / tags, kept in id2label (else id2label is fixed)
      reads_columns:  its reader takes text_columns / label_column (a table of texts and a label)
      recipe:         the shipped recipe it trains with by default
      metric_names:   the metrics scored on every eval set; main_metric picks the best checkpoint
      Options:        its options' dataclass (fields with defaults, a `check(prefix)`); NoOptions by default

    A saved model is the kind's when its head class ends with `head` and its problem_type
    (`problem_type_of`) is exactly `problem_type`.
    """

    name: str = ""
    head: str = ""
    problem_type: str | None = None
    named_labels: bool = False
    reads_columns: bool = False
    recipe: str = "finetune-glue"
    metric_names: tuple[str, ...] = ()
    main_metric: str = ""
    Options: type = NoOptions

    def __repr__(self) -> str:
        return f"<task kind {self.name}>"

    # A kind equals its registered name too: code that compared the name (`model.kind == "qa"`)
    # keeps working now that the Kind object travels.
    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return other == self.name
        return self is other

    def __hash__(self) -> int:
        return hash(self.name)

    # -- options ---------------------------------------------------------------------------
    def options(self, values: Mapping | None = None, prefix: str = ""):
        """The kind's typed options from a mapping (a recipe's kinds.<name>, a task record);
        RecipeError naming prefix + key for an unknown key, a wrong type or a value out of range."""
        opts = build(self.Options, dict(values or {}), prefix)
        opts.check(prefix)
        return opts

    # -- reading ---------------------------------------------------------------------------
    def read(self, path, labels: Sequence[str] | None = None, *, labelled: bool = True, table: Mapping | None = None,
             **columns):
        """(examples, labels) of one file; labels None where the kind names none. labelled=False
        reads a file to predict on (labels may be absent; those present are checked). table: how
        a table is read (text_columns, label_column; a GLUE preset's columns, values), for the
        kinds that read tables (`reads_columns`); the keywords of the same names go there too."""
        unknown = sorted(set(columns) - set(_COLUMNS))
        if unknown:
            raise TypeError(f"{type(self).__name__}.read() got unexpected keyword argument(s) {unknown}")
        return self.read_file(path, labels, labelled, {**(table or {}), **columns})

    def read_file(self, path, labels: Sequence[str] | None, labelled: bool, table: dict):
        """The kind's reader: (examples, labels) of one file."""
        raise NotImplementedError

    def check_labels(self, path, labels) -> None:
        """Refuses a training file's label set the kind cannot train on (TaskDataError)."""

    def check_scorable(self, path, examples: list, options) -> None:
        """Refuses a labelled eval file the kind's metric cannot score under these options (TaskDataError)."""

    # -- arrays ----------------------------------------------------------------------------
    def featurize(self, examples, tok, max_length: int, options=None, labels: Sequence[str] | None = None):
        """(Features, windows): windows is what decoding needs beyond the features (QA's), else None;
        options: the kind's Options (default: its defaults); labels: the task's class / tag names in id
        order (TaskData.labels in training, the model's id2label in predict / evaluate; None where the
        kind names none), so a kind whose targets are one column per label sizes them by the task, not by
        the labels an eval file happens to use."""
        return self.make_features(examples, tok, max_length, self.Options() if options is None else options,
                                  None if labels is None else tuple(labels))

    def make_features(self, examples, tok, max_length: int, options, labels: tuple[str, ...] | None):
        """The kind's featurizer: (Features, windows or None); labels as `featurize` gets them."""
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
    def metrics(self, options=None) -> tuple[tuple[str, ...], str]:
        """(metric names for metrics.compute, the metric key that picks the best checkpoint) under these options."""
        return self.metric_names, self.main_metric

    def decode(self, outputs: dict, features, windows=None, labels: Sequence[str] | None = None,
               options=None) -> dict:
        """{"predictions": one per example, "scores": per example or None[, more the kind keeps]};
        options: the kind's Options (default: its defaults)."""
        return self.decode_outputs(outputs, features, windows, labels, self.Options() if options is None else options)

    def decode_outputs(self, outputs: dict, features, windows, labels: Sequence[str] | None, options) -> dict:
        """The kind's decoding; by default the argmax class and its softmax probability."""
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
        """Whether a fine-tuned model's config is this kind's: its head class ends with `head` and
        its problem_type is exactly the kind's."""
        head = (config.architectures or [""])[0]
        return head.endswith(self.head) and self.problem_type_of(config) == self.problem_type

    def problem_type_of(self, config) -> str | None:
        """config.json's problem_type (a field of a family's own config class, else in BertConfig's extra)."""
        return problem_type(config)

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


def problem_type(config) -> str | None:
    """A config's problem_type as written (a field of a family's config class, else in BertConfig's extra)."""
    return getattr(config, "problem_type", None) or config.extra.get("problem_type")
