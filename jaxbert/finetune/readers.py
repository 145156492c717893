"""Task examples from data files: the readers the task kinds (jaxbert.finetune.kinds) read with.

`read_text`: one or two text columns and a label column (a class name, or a number with
numeric=True); `read_tokens`: CoNLL text or JSONL with `tokens` / `tags`; `read_choice`:
SWAG-style CSV or JSONL with `context`, `endings`, `label` (SQuAD JSON is read by the qa kind, jaxbert.finetune.kinds.qa.squad).
`read_task` reads a training file and its eval files with a kind's reader; the training file
fixes the label set unless one is given.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from jaxbert.finetune.tables import (TaskDataError, cell, data_file, local_path, read_rows, require_columns, show,
                                     text_cell)

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


def _no_label(value) -> bool:
    """In a file to predict on: a row without a label (null, or -1, the Hugging Face datasets'
    label of an unlabelled test row)."""
    return value is None or (not isinstance(value, bool) and value in (-1, "-1"))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _label_ids(path, raw: list, lines: list[int], labels: Sequence[str] | None, what: str,
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
    training (label 0 stands in where there is none). values: the file's spelling of each label (see _label_ids).
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
        raw = [(v, n) for v, n in raw if not _no_label(v)]
    if numeric:
        found = {n: _target(path, v, n, label_column) for v, n in raw}
        targets, labels = [found.get(n, 0.0) for n in lines], None
    else:
        ids, labels = _label_ids(path, [v for v, _ in raw], [n for _, n in raw], labels, label_column, values)
        found = dict(zip([n for _, n in raw], ids))
        targets = [found.get(n, 0) for n in lines]
    name = local_path(path).name
    examples = [TextExample(f"{name}:{n}", t[0], t[1] if len(t) > 1 else None, y)
                for t, y, n in zip(texts, targets, lines)]
    return examples, labels


def _conll_sentences(path, labelled: bool = True):
    """[(first line, words, tags, tag lines)] of a CoNLL file: token ... tag per line, blank between.

    A byte-order mark before the first line is dropped (so a leading -DOCSTART- is still one).
    labelled=False: a line may hold the word alone; tags are "O" where absent.
    """
    sentences, words, tags, tag_lines = [], [], [], []
    with open(data_file(path), encoding="utf-8-sig") as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            if fields and fields[0] == "-DOCSTART-":
                continue
            if fields and len(fields) < 2 and labelled:
                raise TaskDataError(f"{path}: line {n} has a token without a tag: {line.strip()!r}")
            if fields:
                words.append(fields[0])
                tags.append(fields[-1] if len(fields) > 1 else "O")
                tag_lines.append(n)
            elif words:
                sentences.append((tag_lines[0], words, tags, tag_lines))
                words, tags, tag_lines = [], [], []
    if words:
        sentences.append((tag_lines[0], words, tags, tag_lines))
    return sentences


def _jsonl_sentences(path, labels, labelled: bool = True):
    rows, lines = read_rows(path)
    require_columns(path, rows, ["tokens", "tags"] if labelled else ["tokens"])
    out = []
    for row, n in zip(rows, lines):
        words = cell(path, row, n, "tokens")
        if not isinstance(words, list):
            raise TaskDataError(f"{path}: line {n} has tokens {show(words)}, not a list of words")
        bad = next((w for w in words if not isinstance(w, str)), "ok")
        if bad != "ok":
            raise TaskDataError(f"{path}: line {n} has the word {show(bad)} in tokens, which is not text")
        if not labelled:
            out.append((n, list(words), ["O"] * len(words), [n] * len(words)))
            continue
        tags = cell(path, row, n, "tags")
        if not isinstance(tags, list) or len(words) != len(tags):
            raise TaskDataError(f"{path}: line {n} needs lists `tokens` and `tags` of one length")
        if labels is not None and tags and all(isinstance(t, int) and not isinstance(t, bool) for t in tags):
            tags = [labels[t] if 0 <= t < len(labels) else t for t in tags]  # ids given as ints
        bad = next((t for t in tags if not isinstance(t, str)), "ok")
        if bad != "ok":
            raise TaskDataError(f"{path}: line {n} has the tag {show(bad)} in tags, which is not an IOB tag")
        out.append((n, list(words), list(tags), [n] * len(tags)))
    return out


def read_tokens(path, labels: Sequence[str] | None = None, labelled: bool = True):
    """(examples, tag labels) of a CoNLL text file or a JSONL file of {"tokens": [...], "tags": [...]}.

    Tags must be IOB (IOB1 or IOB2): O, B-TYPE or I-TYPE. labelled=False (predict): tags are
    not read (each word gets tag id 0).
    """
    suffix = local_path(path).suffix.lower()
    if suffix in (".jsonl", ".json", ".parquet"):
        sentences = _jsonl_sentences(path, labels, labelled)
    elif suffix in CONLL_SUFFIXES:
        sentences = _conll_sentences(path, labelled)
    else:
        raise TaskDataError(f"{path}: unknown file extension {suffix or '(none)'!r} for token data; expected "
                            f"one of {', '.join(CONLL_SUFFIXES + ('.jsonl', '.parquet'))}")
    if not sentences:
        raise TaskDataError(f"{path} is empty")
    name = local_path(path).name
    if not labelled:
        return [TokenExample(f"{name}:{first}", tuple(words), (0,) * len(words))
                for first, words, _, _ in sentences], labels
    for _, _, tags, tag_lines in sentences:
        for tag, line in zip(tags, tag_lines):
            if not _IOB_TAG.match(tag):
                raise TaskDataError(f"{path}: line {line} has tag {tag!r}, which is not IOB (O, B-TYPE, I-TYPE)")
    flat = [t for s in sentences for t in s[2]]
    flat_lines = [n for s in sentences for n in s[3]]
    ids, labels = _label_ids(path, flat, flat_lines, labels, "tag")
    examples, k = [], 0
    for first, words, tags, _ in sentences:
        examples.append(TokenExample(f"{name}:{first}", tuple(words), tuple(ids[k:k + len(tags)])))
        k += len(tags)
    return examples, labels


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
        index = 0 if not labelled and _no_label(value) else _ending_index(path, value, n, len(options))
        examples.append(ChoiceExample(f"{name}:{n}", context, options, index))
    return examples, None


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
    if "version_2" in more:  # the former keyword: version_2=False checked the eval files
        options = kind.legacy_options(options, {"version_2": more.pop("version_2")}, "read_task", ("version_2",))
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


__all__ = ["TextExample", "TokenExample", "ChoiceExample", "label_list", "read_text",
           "read_tokens", "read_choice", "read_task", "check_label_names", "TaskDataError"]
