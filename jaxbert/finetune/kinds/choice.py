"""Multiple choice: a context and C candidate endings, the index of the right one.

Read by read_choice (SWAG CSV or JSONL), featurized by choice_features ([N, C, L] (context,
ending) pairs), trained with cross-entropy over the C endings' scores, scored by accuracy, saved
as ...ForMultipleChoice (id2label keeps transformers' default two entries; the head scores each ending).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

from jaxbert.finetune.features import Features, encode, sequence_arrays, special_id
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.readers import no_label
from jaxbert.finetune.row_files import TaskDataError, cell, local_path, read_rows, require_columns, show, text_cell


@dataclass(frozen=True)
class ChoiceExample:
    """A context and C candidate endings; label is the index of the right ending."""

    id: str
    context: str
    endings: tuple[str, ...]
    label: int


def _ending_index(path, value, line: int, n_endings: int) -> int:
    """A choice label: the 0-based index of the right ending (a whole number, or its digits as text)."""
    index = None
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        index = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        index = int(value)
    if index is None:
        raise TaskDataError(f"{path}: line {line} has label {show(value)}, not an ending index (0 .. {n_endings - 1})")
    if not 0 <= index < n_endings:
        raise TaskDataError(f"{path}: line {line} has label {index} for {n_endings} endings")
    return index


def read_choice(path, n_choices: int | None = None, labelled: bool = True):
    """Multiple-choice examples: SWAG CSV (sent1, sent2, ending0.., label) or JSONL (context, endings, label).

    In the SWAG layout the context is sent1 and each candidate is "sent2 ending_i". Every row
    needs the same number of endings, at least 2. labelled=False (predict): the label may be
    absent, null or -1 (0 stands in); one that is there is checked as in training.
    """
    rows, lines = read_rows(path)
    name, examples = local_path(path).name, []
    swag = "sent1" in rows[0]
    label = ["label"] if labelled else []
    if swag:
        endings = sorted((c for c in rows[0] if re.fullmatch(r"ending\d+", str(c))), key=lambda c: int(c[6:]))
        require_columns(path, rows, ["sent1", "sent2", "ending0"] + label)
    else:
        require_columns(path, rows, ["context", "endings"] + label)
    for row, n in zip(rows, lines):
        if swag:
            context = text_cell(path, row, n, "sent1")
            start = text_cell(path, row, n, "sent2")
            options = tuple(f"{start} {text_cell(path, row, n, c)}".strip() for c in endings)
        else:
            context, options = text_cell(path, row, n, "context"), cell(path, row, n, "endings")
            if not isinstance(options, list):
                raise TaskDataError(f"{path}: line {n} has endings {show(options)}, not a list of endings")
            bad = next((o for o in options if not isinstance(o, str)), "ok")
            if bad != "ok":
                raise TaskDataError(f"{path}: line {n} has the ending {show(bad)}, which is not text")
            options = tuple(options)
        if len(options) < 2:
            raise TaskDataError(f"{path}: line {n} has {len(options)} ending(s); a choice needs at least 2")
        if n_choices is not None and len(options) != n_choices:
            raise TaskDataError(f"{path}: line {n} has {len(options)} endings where {n_choices} are expected")
        n_choices = len(options)
        value = row.get("label") if not labelled else cell(path, row, n, "label")
        index = 0 if not labelled and no_label(value) else _ending_index(path, value, n, len(options))
        examples.append(ChoiceExample(f"{name}:{n}", context, options, index))
    return examples, None


def choice_features(examples: Sequence[ChoiceExample], tok: Tokenizer, max_length: int) -> Features:
    """Multiple choice: [N, C, L] arrays of (context, ending) pairs; labels [N] the right ending."""
    if not examples:
        raise TaskDataError("no examples to encode")
    n_choices = len(examples[0].endings)
    bad = next((e.id for e in examples if len(e.endings) != n_choices), None)
    if bad is not None:
        raise TaskDataError(f"example {bad} has a different number of endings than {n_choices}")
    inputs = [(e.context, ending) for e in examples for ending in e.endings]
    encodings, truncated = encode(tok, inputs, max_length)
    pad = special_id(tok, "pad")
    arrays, lengths, length = sequence_arrays(encodings, max_length, pad)
    n = len(examples)
    arrays = {k: v.reshape(n, n_choices, length) for k, v in arrays.items()}
    arrays["labels"] = np.array([e.label for e in examples], dtype=np.int32)
    return Features(arrays, lengths.reshape(n, n_choices).max(axis=1), int(truncated.reshape(n, -1).any(1).sum()),
                    max_length, pad_values={"input_ids": pad})


class Choice(Kind):
    name = "choice"
    head = "ForMultipleChoice"
    metric_names = ("accuracy",)
    main_metric = "accuracy"

    def read_file(self, path, labels, labelled, table):
        return read_choice(path, labelled=labelled)

    def make_features(self, examples, tok, max_length, options, labels):
        return choice_features(examples, tok, max_length), None

    def inputs(self, example, columns: dict) -> dict:
        return {"context": example.context, "endings": list(example.endings)}

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"label": int(decoded["predictions"][i]), "score": float(decoded["scores"][i])}


KIND = Choice()
