"""Token tagging's examples: a sentence's words with one IOB tag per word, from CoNLL text (token ...
tag per line, a blank line between sentences) or JSONL / Parquet rows of ``tokens`` and ``tags``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from jaxbert.finetune.readers import label_ids
from jaxbert.finetune.row_files import TaskDataError, cell, data_file, local_path, read_rows, require_columns, show

CONLL_SUFFIXES = (".txt", ".conll", ".iob", ".bio", ".tsv")
_IOB_TAG = re.compile(r"^(O|[BI]-.+)$")


@dataclass(frozen=True)
class TokenExample:
    """A sentence as words [W] with one tag id per word (ids index the task's label list)."""

    id: str
    words: tuple[str, ...]
    tags: tuple[int, ...]


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
    ids, labels = label_ids(path, flat, flat_lines, labels, "tag")
    examples, k = [], 0
    for first, words, tags, _ in sentences:
        examples.append(TokenExample(f"{name}:{first}", tuple(words), tuple(ids[k:k + len(tags)])))
        k += len(tags)
    return examples, labels
