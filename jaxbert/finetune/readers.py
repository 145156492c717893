"""Task examples from data files: what the task kinds' readers (jaxbert.finetune.kinds) share.

`read_text`: one or two text columns and a label column (a class name, or a number with
numeric=True), which classification and regression read; `label_ids` and `no_label`: labels as
ids and unlabelled rows, for every kind's reader. The other kinds read their own formats
(token tagging: kinds.tokens.reader; multiple choice: kinds.choice; SQuAD JSON: kinds.qa.squad).
`read_task` reads a training file and its eval files with a kind's reader; the training file
fixes the label set unless one is given.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from jaxbert.finetune.row_files import TaskDataError, cell, local_path, read_rows, require_columns, show, text_cell


@dataclass(frozen=True)
class TextExample:
    """A sentence or sentence pair; label is a class id (classification) or a float (regression)."""

    id: str
    text_a: str
    text_b: str | None
    label: int | float


def label_list(values) -> tuple[str, ...]:
    """The sorted distinct labels as strings; numerically when every label is an integer."""
    names = {str(v) for v in values}
    if all(re.fullmatch(r"-?\d+", n) for n in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


def check_label_names(labels: Sequence[str], what: str = "--labels") -> tuple[str, ...]:
    """Given class / tag names in id order: each a non-empty string, none twice."""
    labels = tuple(labels)
    seen = set()
    for name in labels:
        if not isinstance(name, str) or not name.strip():
            raise TaskDataError(f"{what}: {show(name)} is not a label name (in {', '.join(map(str, labels))})")
        if name in seen:
            raise TaskDataError(f"{what}: {name!r} is given twice (in {','.join(labels)}); each class once")
        seen.add(name)
    return labels


def _label_key(path, value, line: int, what: str) -> str:
    """A class label cell as its name: a string, a whole number, or true / false (named as JSON
    spells them); null, a list, NaN and a fractional number are refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    bad = (value is None or isinstance(value, (list, dict))
           or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))
           or (isinstance(value, str) and not value.strip()))
    if bad:
        raise TaskDataError(f"{path}: line {line} has {what} {show(value)}, which is not a class label")
    return str(value)


def no_label(value) -> bool:
    """In a file to predict on: a row without a label (null, or -1, the Hugging Face datasets'
    label of an unlabelled test row)."""
    return value is None or (not isinstance(value, bool) and value in (-1, "-1"))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def label_ids(path, raw: list, lines: list[int], labels: Sequence[str] | None, what: str,
               values: Sequence[str] | None = None):
    """Raw labels -> ids into `labels` (built from `raw` when None); error on an unknown one.

    values: how the file spells each label, in id order, when that differs from the names
    (GLUE's 0 / 1 for named classes). One number spelt two ways (1 and 1.0) is refused.
    """
    keys = [_label_key(path, v, n, what) for v, n in zip(raw, lines)]
    if labels is None:
        spelt: dict[float, tuple[str, int]] = {}
        for key, line in zip(keys, lines):
            number = _number(key)
            if number is None or not math.isfinite(number):
                continue
            first = spelt.setdefault(number, (key, line))
            if first[0] != key:
                raise TaskDataError(f"{path}: line {line} has {what} {key!r} beside {first[0]!r} (line {first[1]}): "
                                    f"one class spelt two ways; write every label the same way")
        labels = label_list(keys)
    labels = tuple(labels)
    spellings = tuple(values) if values is not None else labels
    index = {name: i for i, name in enumerate(spellings)}
    ids = []
    for key, line in zip(keys, lines):
        if key not in index:
            raise TaskDataError(f"{path}: line {line} has {what} {key!r}, which is not among the training "
                                f"labels ({', '.join(spellings)})")
        ids.append(index[key])
    return ids, labels


def _target(path, value, line: int, what: str) -> float:
    """A regression label: a finite number (a JSON number or numeric text); NaN, Inf, null, true refused."""
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        number = _number(value.strip())
    if number is None:
        raise TaskDataError(f"{path}: line {line} has {what} {show(value)}, not a number")
    if not math.isfinite(number):
        raise TaskDataError(f"{path}: line {line} has {what} {show(value)}, which is not a finite number")
    return number


def read_text(path, text_columns: Sequence[str], label_column: str,
              labels: Sequence[str] | None = None, columns: Sequence[str] | None = None,
              labelled: bool = True, values: Sequence[str] | None = None, numeric: bool = False):
    """(examples, labels): class labels named by `labels`, or (numeric=True) numbers, labels None.

    text_columns: one or two column names (sentence, or sentence pair); `columns` names the
    fields of a headerless TSV/CSV. labelled=False (predict): the label column may be absent,
    and a row's label may be null or -1 (unlabelled); a label that is there is checked as in
    training (label 0 stands in where there is none). values: the file's spelling of each label (see label_ids).
    """
    if not 1 <= len(text_columns) <= 2:
        raise TaskDataError(f"{path}: text_columns must name 1 or 2 columns, got {list(text_columns)}")
    rows, lines = read_rows(path, columns)
    require_columns(path, rows, [*text_columns] + ([label_column] if labelled else []))
    texts = [[text_cell(path, r, n, c) for c in text_columns] for r, n in zip(rows, lines)]
    if labelled:
        raw = [(cell(path, r, n, label_column), n) for r, n in zip(rows, lines)]
    else:
        raw = [(r.get(label_column), n) for r, n in zip(rows, lines)]
        raw = [(v, n) for v, n in raw if not no_label(v)]
    if numeric:
        found = {n: _target(path, v, n, label_column) for v, n in raw}
        targets, labels = [found.get(n, 0.0) for n in lines], None
    else:
        ids, labels = label_ids(path, [v for v, _ in raw], [n for _, n in raw], labels, label_column, values)
        found = dict(zip([n for _, n in raw], ids))
        targets = [found.get(n, 0) for n in lines]
    name = local_path(path).name
    examples = [TextExample(f"{name}:{n}", t[0], t[1] if len(t) > 1 else None, y)
                for t, y, n in zip(texts, targets, lines)]
    return examples, labels


def read_task(kind, train: str | os.PathLike, evals: Mapping[str, str | os.PathLike],
              labels: Sequence[str] | None = None, options=None, table: Mapping | None = None, **more):
    """(train examples, {eval name: examples}, labels) read by `kind` (a jaxbert.finetune.kinds
    Kind): the training file fixes the label set, and the kind checks it; each eval file is
    checked as scorable under the kind's options (QA without version_2: every question answered).

    `table` (text_columns / label_column / columns / values) goes to the kind's `read`; so do
    those keywords given one by one, as read_task took them before.
    """
    if labels is not None:
        labels = check_label_names(labels)
    table = {**(table or {}), **{k: more.pop(k) for k in ("text_columns", "label_column", "columns", "values")
                                 if k in more}}
    if more:
        raise TypeError(f"read_task() got unexpected keyword argument(s) {sorted(more)}")
    train_examples, labels = kind.read(train, labels, table=table)
    kind.check_labels(train, labels)
    eval_examples = {}
    for name, path in evals.items():
        eval_examples[name], _ = kind.read(path, labels, table=table)
        if options is not None:  # without options, as the former default version_2=True, nothing more is checked
            kind.check_scorable(path, eval_examples[name], options)
    return train_examples, eval_examples, labels


__all__ = ["TextExample", "label_list", "label_ids", "no_label", "read_text", "read_task", "check_label_names",
           "TaskDataError"]
