"""Task examples from data files, one reader per task kind.

Kinds: "classification" and "regression" (one or two text columns and a label column),
"tokens" (CoNLL text or JSONL with `tokens` / `tags`), "qa" (SQuAD v1.1 / v2.0 JSON) and
"choice" (SWAG-style CSV or JSONL with `context`, `endings`, `label`). `read_task` reads a
training file and its eval files; the training file fixes the label set unless one is given.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from jaxbert.finetune.squad import QAExample, read_squad
from jaxbert.finetune.tables import TaskDataError, cell, local_path, read_rows, require_columns

KINDS = ("classification", "regression", "tokens", "qa", "choice")
CONLL_SUFFIXES = (".txt", ".conll", ".iob", ".bio", ".tsv")
_IOB_TAG = re.compile(r"^(O|[BI]-.+)$")


@dataclass(frozen=True)
class TextExample:
    """A sentence or sentence pair; label is a class id (classification) or a float (regression)."""

    id: str
    text_a: str
    text_b: str | None
    label: int | float


@dataclass(frozen=True)
class TokenExample:
    """A sentence as words [W] with one tag id per word (ids index the task's label list)."""

    id: str
    words: tuple[str, ...]
    tags: tuple[int, ...]


@dataclass(frozen=True)
class ChoiceExample:
    """A context and C candidate endings; label is the index of the right ending."""

    id: str
    context: str
    endings: tuple[str, ...]
    label: int


def label_list(values) -> tuple[str, ...]:
    """The sorted distinct labels as strings; numerically when every label is an integer."""
    names = {str(v) for v in values}
    if all(re.fullmatch(r"-?\d+", n) for n in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


def _label_ids(path, raw: list, lines: list[int], labels: Sequence[str] | None, what: str):
    """Raw labels -> ids into `labels` (built from `raw` when None); error on an unknown one."""
    labels = tuple(labels) if labels is not None else label_list(raw)
    index = {name: i for i, name in enumerate(labels)}
    ids = []
    for value, line in zip(raw, lines):
        key = str(value)
        if key not in index:
            raise TaskDataError(f"{path}: line {line} has {what} {key!r}, which is not among the training "
                                f"labels ({', '.join(labels)})")
        ids.append(index[key])
    return ids, labels


def read_text(path, kind: str, text_columns: Sequence[str], label_column: str,
              labels: Sequence[str] | None = None, columns: Sequence[str] | None = None):
    """(examples, labels) for classification or regression; labels is None for regression.

    text_columns: one or two column names (sentence, or sentence pair); `columns` names the
    fields of a headerless TSV/CSV.
    """
    if not 1 <= len(text_columns) <= 2:
        raise TaskDataError(f"{path}: text_columns must name 1 or 2 columns, got {list(text_columns)}")
    rows, lines = read_rows(path, columns)
    require_columns(path, rows, [*text_columns, label_column])
    texts = [[str(cell(path, r, n, c)) for c in text_columns] for r, n in zip(rows, lines)]
    raw = [cell(path, r, n, label_column) for r, n in zip(rows, lines)]
    name = local_path(path).name
    if kind == "regression":
        values = []
        for value, line in zip(raw, lines):
            try:
                values.append(float(value))
            except (TypeError, ValueError):
                raise TaskDataError(f"{path}: line {line} has {label_column} {value!r}, not a number") from None
        targets, labels = values, None
    elif kind == "classification":
        targets, labels = _label_ids(path, raw, lines, labels, f"{label_column}")
    else:
        raise TaskDataError(f"{path}: read_text reads classification or regression data, not {kind!r}")
    examples = [TextExample(f"{name}:{n}", t[0], t[1] if len(t) > 1 else None, y)
                for t, y, n in zip(texts, targets, lines)]
    return examples, labels


def _conll_sentences(path):
    """[(first line, words, tags, tag lines)] of a CoNLL file: token ... tag per line, blank between."""
    sentences, words, tags, tag_lines = [], [], [], []
    with open(local_path(path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            if fields and fields[0] == "-DOCSTART-":
                continue
            if fields and len(fields) < 2:
                raise TaskDataError(f"{path}: line {n} has a token without a tag: {line.strip()!r}")
            if fields:
                words.append(fields[0])
                tags.append(fields[-1])
                tag_lines.append(n)
            elif words:
                sentences.append((tag_lines[0], words, tags, tag_lines))
                words, tags, tag_lines = [], [], []
    if words:
        sentences.append((tag_lines[0], words, tags, tag_lines))
    return sentences


def _jsonl_sentences(path, labels):
    rows, lines = read_rows(path)
    require_columns(path, rows, ["tokens", "tags"])
    out = []
    for row, n in zip(rows, lines):
        words, tags = cell(path, row, n, "tokens"), cell(path, row, n, "tags")
        if not isinstance(words, list) or not isinstance(tags, list) or len(words) != len(tags):
            raise TaskDataError(f"{path}: line {n} needs lists `tokens` and `tags` of one length")
        if labels is not None and tags and all(isinstance(t, int) for t in tags):
            tags = [labels[t] if 0 <= t < len(labels) else t for t in tags]  # ids given as ints
        out.append((n, [str(w) for w in words], [str(t) for t in tags], [n] * len(tags)))
    return out


def read_tokens(path, labels: Sequence[str] | None = None):
    """(examples, tag labels) of a CoNLL text file or a JSONL file of {"tokens": [...], "tags": [...]}.

    Tags must be IOB (IOB1 or IOB2): O, B-TYPE or I-TYPE.
    """
    suffix = local_path(path).suffix.lower()
    if suffix in (".jsonl", ".json", ".parquet"):
        sentences = _jsonl_sentences(path, labels)
    elif suffix in CONLL_SUFFIXES:
        if not local_path(path).is_file():
            raise TaskDataError(f"data file not found: {local_path(path)}")
        sentences = _conll_sentences(path)
    else:
        raise TaskDataError(f"{path}: unknown file extension {suffix or '(none)'!r} for token data; expected "
                            f"one of {', '.join(CONLL_SUFFIXES + ('.jsonl', '.parquet'))}")
    if not sentences:
        raise TaskDataError(f"{path} is empty")
    for _, _, tags, tag_lines in sentences:
        for tag, line in zip(tags, tag_lines):
            if not _IOB_TAG.match(tag):
                raise TaskDataError(f"{path}: line {line} has tag {tag!r}, which is not IOB (O, B-TYPE, I-TYPE)")
    flat = [t for s in sentences for t in s[2]]
    flat_lines = [n for s in sentences for n in s[3]]
    ids, labels = _label_ids(path, flat, flat_lines, labels, "tag")
    name, examples, k = local_path(path).name, [], 0
    for first, words, tags, _ in sentences:
        examples.append(TokenExample(f"{name}:{first}", tuple(words), tuple(ids[k:k + len(tags)])))
        k += len(tags)
    return examples, labels


def read_choice(path, n_choices: int | None = None):
    """Multiple-choice examples: SWAG CSV (sent1, sent2, ending0.., label) or JSONL (context, endings, label).

    In the SWAG layout the context is sent1 and each candidate is "sent2 ending_i".
    """
    rows, lines = read_rows(path)
    name, examples = local_path(path).name, []
    swag = "sent1" in rows[0]
    if swag:
        endings = sorted((c for c in rows[0] if re.fullmatch(r"ending\d+", str(c))), key=lambda c: int(c[6:]))
        require_columns(path, rows, ["sent1", "sent2", "ending0", "label"])
    else:
        require_columns(path, rows, ["context", "endings", "label"])
    for row, n in zip(rows, lines):
        if swag:
            context = str(cell(path, row, n, "sent1"))
            options = tuple(f"{cell(path, row, n, 'sent2')} {cell(path, row, n, c)}".strip() for c in endings)
        else:
            context, options = str(cell(path, row, n, "context")), cell(path, row, n, "endings")
            if not isinstance(options, list) or not options:
                raise TaskDataError(f"{path}: line {n} has `endings` that is not a non-empty list")
            options = tuple(str(o) for o in options)
        if n_choices is not None and len(options) != n_choices:
            raise TaskDataError(f"{path}: line {n} has {len(options)} endings where {n_choices} are expected")
        n_choices = len(options)
        label = cell(path, row, n, "label")
        try:
            label = int(label)
        except (TypeError, ValueError):
            raise TaskDataError(f"{path}: line {n} has label {label!r}, not an ending index") from None
        if not 0 <= label < len(options):
            raise TaskDataError(f"{path}: line {n} has label {label} for {len(options)} endings")
        examples.append(ChoiceExample(f"{name}:{n}", context, options, label))
    return examples, None


def read_split(kind: str, path, labels: Sequence[str] | None = None, text_columns: Sequence[str] = ("sentence",),
               label_column: str = "label", columns: Sequence[str] | None = None):
    """(examples, labels) of one file of a task kind; labels None where the kind has none."""
    if kind in ("classification", "regression"):
        return read_text(path, kind, text_columns, label_column, labels, columns)
    if kind == "tokens":
        return read_tokens(path, labels)
    if kind == "qa":
        return read_squad(path), None
    if kind == "choice":
        return read_choice(path)
    raise TaskDataError(f"unknown task kind {kind!r}; known: {', '.join(KINDS)}")


def read_task(kind: str, train: str | os.PathLike, evals: Mapping[str, str | os.PathLike],
              labels: Sequence[str] | None = None, **columns):
    """(train examples, {eval name: examples}, labels): the training file fixes the label set.

    `columns` passes text_columns / label_column / columns on to `read_split`.
    """
    train_examples, labels = read_split(kind, train, labels, **columns)
    eval_examples = {}
    for name, path in evals.items():
        eval_examples[name], _ = read_split(kind, path, labels, **columns)
    return train_examples, eval_examples, labels


__all__ = ["KINDS", "TextExample", "TokenExample", "QAExample", "ChoiceExample", "label_list", "read_text",
           "read_tokens", "read_squad", "read_choice", "read_split", "read_task", "TaskDataError"]
