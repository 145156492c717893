"""Rows of a data file as dicts: TSV (GLUE's unquoted layout), CSV, JSONL and parquet.

Every reader returns `(rows, line_numbers)`: rows are dicts column -> value, and
line_numbers[i] is the 1-based line of row i in the file (the row index + 1 for parquet), so a
later check can point at the line it rejects. Problems raise `TaskDataError` with one line
that names the file.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from jaxbert import fs
from jaxbert.errors import InputError, require

TABLE_SUFFIXES = (".tsv", ".csv", ".jsonl", ".json", ".parquet")


class TaskDataError(InputError):
    """A fine-tuning data file is empty, malformed or lacks what the task needs; the message names it."""


def local_path(path: str | os.PathLike) -> Path:
    """A local path for `path`, copying a gs:// / URL file to a local cache first."""
    return fs.local_copy(path) if fs.is_url(path) else Path(path)


def data_file(path: str | os.PathLike) -> Path:
    """The local file behind `path`; an error naming it when it is missing or a folder."""
    p = local_path(path)
    if p.is_dir():
        raise TaskDataError(f"{p} is a folder, not a data file; name a file in it")
    if not p.is_file():
        raise TaskDataError(f"data file not found: {p}")
    return p


def show(value) -> str:
    """A cell's value as an error message quotes it: JSON's spelling for null / lists / objects."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False)
        return (text[:60] + "...") if len(text) > 60 else text
    return repr(value)


def text_cell(path, row: dict, line: int, name: str) -> str:
    """A text cell: a string, else an error naming the file, line, column and value (null, a list...)."""
    value = cell(path, row, line, name)
    if not isinstance(value, str):
        raise TaskDataError(f"{path}: line {line} has {name} {show(value)}, which is not text")
    return value


def _open_text(path: Path):
    try:
        # utf-8-sig drops a byte-order mark before the header (some GLUE TSVs carry one)
        return open(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise TaskDataError(f"cannot read {path}: {e.strerror or e}") from e


def _delimited(path: Path, delimiter: str, quoting: int, columns: Sequence[str] | None):
    """Rows of a delimited file; `columns` names the fields of a file that has no header row."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # MNLI's parse-tree fields run long
    rows, lines = [], []
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        header = list(columns) if columns is not None else next(reader, None)
        if header is None:
            raise TaskDataError(f"{path} is empty")
        for fields in reader:
            if not fields or fields == [""]:
                continue  # blank line (a trailing newline, usually)
            if len(fields) != len(header):
                raise TaskDataError(f"{path}: line {reader.line_num} has {len(fields)} fields where the "
                                    f"header has {len(header)} ({'tab' if delimiter == chr(9) else 'comma'}-separated)")
            rows.append(dict(zip(header, fields)))
            lines.append(reader.line_num)
    if not rows:
        raise TaskDataError(f"{path} has a header row but no data rows" if columns is None else f"{path} is empty")
    return rows, lines


def _jsonl(path: Path):
    rows, lines = [], []
    with _open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}: line {n} is not JSON: {e.msg}") from e
            if not isinstance(row, dict):
                raise TaskDataError(f"{path}: line {n} is a JSON {type(row).__name__}, not an object")
            rows.append(row)
            lines.append(n)
    if not rows:
        raise TaskDataError(f"{path} is empty")
    return rows, lines


def _parquet(path: Path):
    pq = require("pyarrow.parquet", "data", f"reading {path}")
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises its own ArrowInvalid / OSError family
        raise TaskDataError(f"cannot read {path} as parquet: {e}") from e
    if not rows:
        raise TaskDataError(f"{path} is empty")
    return rows, list(range(1, len(rows) + 1))


def read_rows(path: str | os.PathLike, columns: Sequence[str] | None = None) -> tuple[list[dict], list[int]]:
    """(rows, line numbers) of a .tsv / .csv / .jsonl / .parquet file.

    .tsv is read as GLUE writes it: tab-separated, no quoting (a quote character is text);
    .csv uses standard double-quote quoting. `columns` names the fields of a delimited file
    that has no header row (CoLA's train.tsv / dev.tsv).
    """
    p = data_file(path)
    suffix = p.suffix.lower()
    if suffix == ".tsv":
        return _delimited(p, "\t", csv.QUOTE_NONE, columns)
    if suffix == ".csv":
        return _delimited(p, ",", csv.QUOTE_MINIMAL, columns)
    if suffix in (".jsonl", ".json"):
        return _jsonl(p)
    if suffix == ".parquet":
        return _parquet(p)
    raise TaskDataError(f"{p}: unknown file extension {suffix or '(none)'!r}; "
                        f"expected one of {', '.join(TABLE_SUFFIXES)}")


def require_columns(path, rows: list[dict], names: Sequence[str]) -> None:
    """Raise naming the first of `names` absent from the first row, and the columns present."""
    for name in names:
        if name not in rows[0]:
            raise TaskDataError(f"{path} has no column {name!r}; its columns: {', '.join(map(str, rows[0]))}")


def cell(path, row: dict, line: int, name: str):
    """row[name], or an error naming the file, line and column (a JSONL record may lack a key)."""
    try:
        return row[name]
    except KeyError:
        raise TaskDataError(f"{path}: line {line} has no {name!r}; it has: {', '.join(map(str, row))}") from None
