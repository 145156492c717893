"""Read documents from text, jsonl, parquet, `datasets.save_to_disk` folders, or the embedded corpus.

A document is a string. Plain text files hold documents separated by blank lines; jsonl,
parquet and Arrow records hold one document each in `text_field`. Bytes that are not UTF-8 are
replaced with U+FFFD and counted per file; empty files are skipped and reported.

With no inputs, the corpus is Python's own documentation, which ships with every Python:
the language reference in `pydoc_data.topics` and the docstrings of the standard library.
"""

from __future__ import annotations

import codecs
import glob
import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from jaxbert import fs
from jaxbert.data.embedded import default_corpus_size, default_documents
from jaxbert.errors import InputError, require

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


TEXT_SUFFIXES = {".txt", ".text"}
JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}
KNOWN_SUFFIXES = TEXT_SUFFIXES | JSONL_SUFFIXES | {".parquet", ".arrow"}
# A blank-line-free text file would otherwise become one document held whole in memory.
MAX_DOCUMENT_CHARS = 1 << 20

# Invalid UTF-8 sequences replaced in the file being read, per thread (a distributed runner may
# read several files at once in one process).
_replaced = threading.local()


def _count_and_replace(exc):
    if isinstance(exc, UnicodeDecodeError):
        _replaced.count = getattr(_replaced, "count", 0) + 1
        return "\ufffd", exc.end
    raise exc


codecs.register_error("jaxbert.count", _count_and_replace)


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


def _folder_files(root: Path) -> list[Path]:
    """The input files under a folder, sorted, hidden names skipped. Links to folders are followed
    (rglob does not, and their documents would be lost without a word), each real folder once:
    a folder reached twice (a link to a sibling also given, a link back up, a loop) is read once."""
    seen: set[str] = set()
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            f = Path(dirpath) / name
            if not name.startswith(".") and f.suffix.lower() in KNOWN_SUFFIXES and f.is_file():
                found.append(f)
    return sorted(found)


def resolve_inputs(inputs: list[str] | str, fetch: bool = True) -> list[tuple[str, Path]]:
    """Expand globs and folders into a sorted list of (kind, path); an error for any that match nothing.

    URLs (gs://...) are read from local copies fetched here; with fetch=False they stay URLs
    (each file fetched by whoever reads it: a worker of a distributed runner)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    sources: list[tuple[str, Path]] = []
    for item in inputs:
        item = str(item)
        if fs.is_url(item):  # read from local copies, fetched once per process
            if fetch:
                sources += resolve_inputs([str(fs.local_copy(u)) for u in fs.expand(item)])
            else:
                sources += [(_kind(Path(u)), u) for u in fs.expand(item)]
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
            found = _folder_files(p)
            if not found:
                raise CorpusError(f"folder {p} holds no .txt, .jsonl, .json, .parquet or .arrow files")
            sources += [(_kind(f), f) for f in found]
        elif p.is_file():
            sources.append((_kind(p), p))
        elif p.exists():
            raise CorpusError(f"{p}: neither a file nor a folder (a FIFO, socket or device); give a file or a folder")
        else:
            raise CorpusError(f"input not found: {p}")
    return sources


def _text_documents(path: Path) -> Iterator[tuple[str, int]]:
    """Blank-line separated documents; yields (document, bytes read since the last yield).

    Reads at most MAX_DOCUMENT_CHARS bytes at a time, so a file without newlines
    (or with one huge line) becomes documents of bounded size, never one string.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("jaxbert.count")  # a character cut at a read boundary waits
    pieces, size, nbytes, line_open = [], 0, 0, False
    with open(path, "rb") as f:
        while True:
            raw = f.readline(MAX_DOCUMENT_CHARS)
            if not raw:
                break
            nbytes += len(raw)
            ends = raw.endswith(b"\n")
            text = decoder.decode(raw)
            line = text.rstrip("\r\n") if ends else text
            if line.strip() or line_open:
                if line_open and pieces:  # the rest of a line longer than one read
                    pieces[-1] += line
                else:
                    pieces.append(line)
                size += len(line)
                line_open = not ends
                if size < MAX_DOCUMENT_CHARS:
                    continue
            if pieces and (size >= MAX_DOCUMENT_CHARS or not line.strip()):
                yield "\n".join(pieces), nbytes
                pieces, size, nbytes = [], 0, 0
        rest = decoder.decode(b"", final=True)
        if rest:
            pieces.append(rest)
    if pieces or nbytes:
        yield "\n".join(pieces), nbytes


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


def _arrow_documents(path: Path, fmt: str, text_field: str) -> Iterator[tuple[str, int]]:
    """A parquet or Arrow file's documents; a file pyarrow cannot read (empty, truncated, not that
    format) is a CorpusError naming it."""
    pa = require("pyarrow", "data", f"reading {path}")
    try:
        yield from _arrow_rows(pa, path, fmt, text_field)
    except (pa.ArrowException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CorpusError(f"{path}: not a readable {fmt} file ({first})") from None


def _arrow_rows(pa, path: Path, fmt: str, text_field: str) -> Iterator[tuple[str, int]]:
    pq = require("pyarrow.parquet", "data", f"reading {path}")

    size = path.stat().st_size
    if fmt == "parquet":
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


class Corpus:
    """Iterate `(document, progress_units)`; `stats` holds one SourceStats per file afterwards.

    Empty documents are dropped. An error is raised at the end when no document was found.
    """

    def __init__(self, inputs: list[str] | str | None, text_field: str = "text", fetch: bool = True):
        self.inputs = inputs
        self.text_field = text_field
        self.sources = None if inputs is None else resolve_inputs(inputs, fetch)
        self.stats: list[SourceStats] = []
        self.whole = True  # an empty whole corpus is an error; an empty part of one is not

    def total(self) -> int:
        if self.sources is None:
            return default_corpus_size()
        return sum(fs.as_path(p).stat().length if fs.is_url(p) else p.stat().st_size for _, p in self.sources)

    def _raw(self) -> Iterator[tuple[str, int, SourceStats | None]]:
        if self.sources is None:
            for source, doc, units in default_documents():
                if not self.stats or self.stats[-1].path != source:
                    self.stats.append(SourceStats(source, "embedded"))
                self.stats[-1].bytes += units
                self.stats[-1].documents += bool(doc.strip())
                yield doc, units, None
            return
        for fmt, path in self.sources:
            s = SourceStats(str(path), fmt)
            if fs.is_url(path):  # a source left unfetched (fetch=False) is fetched by its reader
                path = fs.local_copy(path)
            self.stats.append(s)
            _replaced.count = 0
            if fmt == "text":
                docs = _text_documents(path)
            elif fmt == "jsonl":
                docs = _jsonl_documents(path, self.text_field)
            else:
                docs = _arrow_documents(path, fmt, self.text_field)
            try:
                for doc, units in docs:
                    s.bytes += units
                    s.replaced = _replaced.count
                    yield doc, units, s
            except OSError as e:
                raise CorpusError(f"cannot read {path}: {e}") from e
            s.replaced = _replaced.count
            if s.documents == 0:
                s.skipped = "empty" if path.stat().st_size == 0 else "no text"

    def part(self, index: int) -> "Corpus":
        """The corpus of one input file alone (index into `sources`; the embedded corpus is one part).

        Iterating the parts in order yields this corpus's documents, and their `stats` in order
        are this corpus's; a part with no document is no error (the whole is checked as a whole).
        """
        part = Corpus.__new__(Corpus)
        part.inputs, part.text_field, part.stats, part.whole = self.inputs, self.text_field, [], False
        part.sources = None if self.sources is None else [self.sources[index]]
        return part

    def num_parts(self) -> int:
        return 1 if self.sources is None else len(self.sources)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        self.stats = []
        n, pending = 0, 0
        for doc, units, s in self._raw():
            pending += units
            if not doc.strip():
                continue
            # Text files are cut at line boundaries as they are read; a huge jsonl/parquet text is cut here.
            for piece in ((doc,) if s is not None and s.kind == "text" else _bounded(doc)):
                if s is not None:
                    s.documents += 1
                n += 1
                yield piece, pending
                pending = 0
        if n == 0 and self.whole:
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


def _bounded(doc: str) -> Iterator[str]:
    """doc in pieces of at most MAX_DOCUMENT_CHARS, cut at a space where one is near."""
    while len(doc) > MAX_DOCUMENT_CHARS:
        cut = doc.rfind(" ", MAX_DOCUMENT_CHARS // 2, MAX_DOCUMENT_CHARS)
        cut = cut if cut > 0 else MAX_DOCUMENT_CHARS
        yield doc[:cut]
        doc = doc[cut:]
    yield doc


def iter_documents(inputs: list[str] | str | None, text_field: str = "text") -> Iterator[tuple[str, int]]:
    """Shorthand for `iter(Corpus(inputs, text_field))`."""
    return iter(Corpus(inputs, text_field))
