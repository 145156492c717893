"""Read documents from text, jsonl, parquet, `datasets.save_to_disk` folders, or the embedded corpus.

A document is a string. Plain text files hold documents separated by blank lines; jsonl,
parquet and Arrow records hold one document each in `text_field`. Bytes that are not UTF-8 are
replaced with U+FFFD and counted per file; empty files are skipped and reported.

With no inputs, the corpus is Python's own documentation, which ships with every Python:
the language reference in `pydoc_data.topics` and the docstrings of the standard library.
"""

from __future__ import annotations

import ast
import codecs
import functools
import glob
import json
import os
import re
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator
from jaxbert import fs
from jaxbert.errors import InputError

TEXT_SUFFIXES = {".txt", ".text"}
JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}
KNOWN_SUFFIXES = TEXT_SUFFIXES | JSONL_SUFFIXES | {".parquet", ".arrow"}
# A blank-line-free text file would otherwise become one document held whole in memory.
MAX_DOCUMENT_CHARS = 1 << 20

_replaced = [0]
_RULE_LINE = re.compile(r"^[ \t]*([*=\-~^#_])\1{2,}[ \t]*$", re.MULTILINE)  # reST underlines


def _count_and_replace(exc):
    if isinstance(exc, UnicodeDecodeError):
        _replaced[0] += 1
        return "\ufffd", exc.end
    raise exc


codecs.register_error("jaxbert.count", _count_and_replace)


class CorpusError(InputError):
    """An input is missing, unreadable or has no documents."""


@dataclass
class SourceStats:
    """What one input file (or the embedded corpus) contributed."""
    path: str
    kind: str
    bytes: int = 0
    documents: int = 0
    replaced: int = 0  # invalid UTF-8 sequences replaced with U+FFFD
    skipped: str = ""  # why the file gave nothing, e.g. "empty"

    def as_dict(self) -> dict:
        return asdict(self)


def _is_saved_dataset(p: Path) -> bool:
    return (p / "dataset_dict.json").is_file() or (p / "state.json").is_file()


def _kind(p: Path) -> str:
    s = p.suffix.lower()
    if s in JSONL_SUFFIXES:
        return "jsonl"
    if s in (".parquet", ".arrow"):
        return s[1:]
    return "text"


def _dataset_arrow_files(p: Path) -> list[Path]:
    """Arrow files of a save_to_disk folder (its 'train' split for a DatasetDict)."""
    if (p / "dataset_dict.json").is_file():
        splits = json.loads((p / "dataset_dict.json").read_text()).get("splits", [])
        chosen = ["train"] if "train" in splits else splits
        return [f for s in chosen for f in _dataset_arrow_files(p / s)]
    state = json.loads((p / "state.json").read_text())
    return [p / d["filename"] for d in state.get("_data_files", [])]


def resolve_inputs(inputs: list[str] | str) -> list[tuple[str, Path]]:
    """Expand globs and folders into a sorted list of (kind, path); an error for any that match nothing."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    sources: list[tuple[str, Path]] = []
    for item in inputs:
        item = str(item)
        if fs.is_url(item):  # read from local copies, fetched once per process
            sources += resolve_inputs([str(fs.local_copy(u)) for u in fs.expand(item)])
            continue
        if glob.has_magic(item):
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise CorpusError(f"no files match {item!r}")
            sources += resolve_inputs(matches)
            continue
        p = Path(item)
        if p.is_dir() and _is_saved_dataset(p):
            sources += [("arrow", f) for f in _dataset_arrow_files(p)]
        elif p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in KNOWN_SUFFIXES
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
            if not found:
                raise CorpusError(f"folder {p} holds no .txt, .jsonl, .json, .parquet or .arrow files")
            sources += [(_kind(f), f) for f in found]
        elif p.is_file():
            sources.append((_kind(p), p))
        else:
            raise CorpusError(f"input not found: {p}")
    return sources


def _text_documents(path: Path) -> Iterator[tuple[str, int]]:
    """Blank-line separated documents; yields (document, bytes read since the last yield)."""
    lines, size, nbytes = [], 0, 0
    with open(path, "rb") as f:
        for raw in f:
            nbytes += len(raw)
            line = raw.decode("utf-8", "jaxbert.count").rstrip("\r\n")
            if line.strip():
                lines.append(line)
                size += len(line)
                if size < MAX_DOCUMENT_CHARS:
                    continue
            if lines:
                yield "\n".join(lines), nbytes
                lines, size, nbytes = [], 0, 0
    if lines or nbytes:
        yield "\n".join(lines), nbytes


def _jsonl_documents(path: Path, text_field: str) -> Iterator[tuple[str, int]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.decode("utf-8", "jaxbert.count")
            if not line.strip():
                yield "", len(raw)
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict) or text_field not in record:
                fields = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise CorpusError(f"{path}:{lineno}: no field {text_field!r} (found {fields}); "
                                  f"pass --text-field")
            text = record[text_field]
            if text is not None and not isinstance(text, str):
                raise CorpusError(f"{path}:{lineno}: field {text_field!r} is {type(text).__name__}, not text")
            yield text or "", len(raw)


def _arrow_documents(path: Path, kind: str, text_field: str) -> Iterator[tuple[str, int]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(f"reading {path} needs pyarrow: pip install pyarrow") from None

    size = path.stat().st_size
    if kind == "parquet":
        pf = pq.ParquetFile(path)
        names, total = pf.schema_arrow.names, pf.metadata.num_rows
        batches = lambda: pf.iter_batches(batch_size=1024, columns=[text_field])  # noqa: E731
    else:
        with pa.memory_map(str(path)) as m:  # datasets writes the IPC stream format
            try:
                table = pa.ipc.open_stream(m).read_all()
            except pa.ArrowInvalid:
                table = pa.ipc.open_file(m).read_all()
        names, total = table.schema.names, table.num_rows
        batches = lambda: table.select([text_field]).to_batches(max_chunksize=1024)  # noqa: E731
    if text_field not in names:
        raise CorpusError(f"{path}: no column {text_field!r} (columns: {names}); pass --text-field")
    done = 0
    for batch in batches():
        column = batch.column(0)
        binary = pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)
        if not (binary or pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise CorpusError(f"{path}: column {text_field!r} is {column.type}, not text")
        before = done
        done += len(column)
        step = size * done // max(total, 1) - size * before // max(total, 1)
        for i, value in enumerate(column.to_pylist()):
            if binary and value is not None:
                value = value.decode("utf-8", "jaxbert.count")
            yield value or "", step if i == 0 else 0


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3"}
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        files += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    return files


_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _collect_docstrings(body: list, out: list[str]) -> None:
    """Docstrings of the definitions in a statement list, descending only through statements
    (if/try/with blocks and nested definitions), never into expressions: far faster than ast.walk."""
    for node in body:
        if isinstance(node, _DEFS):
            doc = ast.get_docstring(node)
            if doc and doc.strip():
                out.append(doc.strip())
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], (ast.stmt, ast.excepthandler)):
                _collect_docstrings(block, out)


def _docstrings(path: Path) -> str:
    """Module, class and function docstrings of one source file, in source order."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return ""
    doc = ast.get_docstring(tree)
    out = [doc.strip()] if doc and doc.strip() else []
    _collect_docstrings(tree.body, out)
    return "\n".join(out)


def _default_documents(stats: list[SourceStats]) -> Iterator[tuple[str, int]]:
    from pydoc_data.topics import topics

    s = SourceStats("pydoc_data.topics", "embedded")
    stats.append(s)
    for name in sorted(topics):
        s.documents += 1
        s.bytes += len(topics[name])
        yield _RULE_LINE.sub("", topics[name]), len(topics[name])
    s = SourceStats("stdlib docstrings", "embedded")
    stats.append(s)
    for path in _stdlib_files():
        doc, nbytes = _cached_docstrings(path)
        s.bytes += nbytes
        s.documents += bool(doc.strip())
        yield doc, nbytes


@functools.lru_cache(maxsize=None)
def _cached_docstrings(path: Path) -> tuple[str, int]:
    """Parsing the stdlib takes seconds; a process that reads the corpus twice (train a
    tokenizer, then prepare) parses it once. About 2 MB of text is kept."""
    return _docstrings(path), path.stat().st_size


def default_corpus_size() -> int:
    """Progress units of the embedded corpus (topic characters plus stdlib source bytes)."""
    from pydoc_data.topics import topics

    return sum(map(len, topics.values())) + sum(p.stat().st_size for p in _stdlib_files())


class Corpus:
    """Iterate `(document, progress_units)`; `stats` holds one SourceStats per file afterwards.

    Empty documents are dropped. An error is raised at the end when no document was found.
    """

    def __init__(self, inputs: list[str] | str | None, text_field: str = "text"):
        self.inputs = inputs
        self.text_field = text_field
        self.sources = None if inputs is None else resolve_inputs(inputs)
        self.stats: list[SourceStats] = []

    def total(self) -> int:
        if self.sources is None:
            return default_corpus_size()
        return sum(p.stat().st_size for _, p in self.sources)

    def _raw(self) -> Iterator[tuple[str, int, SourceStats | None]]:
        if self.sources is None:
            for doc, units in _default_documents(self.stats):
                yield doc, units, None
            return
        for kind, path in self.sources:
            s = SourceStats(str(path), kind)
            self.stats.append(s)
            _replaced[0] = 0
            if kind == "text":
                docs = _text_documents(path)
            elif kind == "jsonl":
                docs = _jsonl_documents(path, self.text_field)
            else:
                docs = _arrow_documents(path, kind, self.text_field)
            try:
                for doc, units in docs:
                    s.bytes += units
                    s.replaced = _replaced[0]
                    yield doc, units, s
            except OSError as e:
                raise CorpusError(f"cannot read {path}: {e}") from e
            s.replaced = _replaced[0]
            if s.documents == 0:
                s.skipped = "empty" if path.stat().st_size == 0 else "no text"

    def __iter__(self) -> Iterator[tuple[str, int]]:
        self.stats = []
        n, pending = 0, 0
        for doc, units, s in self._raw():
            pending += units
            if not doc.strip():
                continue
            if s is not None:
                s.documents += 1
            n += 1
            yield doc, pending
            pending = 0
        if n == 0:
            where = "the embedded corpus" if self.inputs is None else ", ".join(map(str, self.inputs))
            raise CorpusError(f"empty corpus: no documents in {where}")

    def warnings(self) -> list[str]:
        """One line per file that had bytes replaced or gave nothing."""
        out = []
        for s in self.stats:
            if s.replaced:
                out.append(f"{s.path}: replaced {s.replaced} invalid UTF-8 sequence(s) with U+FFFD")
            if s.skipped:
                out.append(f"{s.path}: skipped ({s.skipped})")
        return out


def iter_documents(inputs: list[str] | str | None, text_field: str = "text") -> Iterator[tuple[str, int]]:
    """Shorthand for `iter(Corpus(inputs, text_field))`."""
    return iter(Corpus(inputs, text_field))
