"""`prepare`: corpus -> tokenizer -> fixed-length rows in memory-mappable .npy shards.

Output folder:
  metadata.json              format version, tokenizer hash, vocab size, special ids, counts, shards
  tokenizer.json             the tokenizer used (the loader reads `##` pieces from it)
  train-00000.npy ...        uint16 (vocab <= 65,536) or uint32 token ids, [rows, max_length]
  train-00000-pairs.npy ...  nsp only: uint16 [rows, 2] = (tokens in segment A, label)
  train-00000-segments.npy   packing documents/none only: uint8 (uint16 past 767 tokens) segment ids
                             [rows, max_length], 0 = padding, 1..k = the documents of the row
  validation-00000.npy ...   the same for the held-out documents

Documents are read in order and cut into chunks (a fixed size, whatever the number of workers);
workers tokenize chunks in parallel and the results are consumed in chunk order, so the files
depend only on the inputs, the tokenizer and the arguments. Every ~1/validation_fraction-th
document (systematic sampling by document index) goes to the validation split. The random
second segment of an nsp pair comes from another document of the same chunk and split.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from jaxbert.data.beam import BeamEncoder, pipeline_args
from jaxbert.data.corpus import Corpus, SourceStats
from jaxbert.data.encode import CHUNK_CHARS, SPLITS, chunks, encode_chunk, init_worker, is_validation
from jaxbert.data.packing import DocumentPacker, MLMPacker
from jaxbert.terminal import progress_bar
from jaxbert.data.tokenizer import load_tokenizer, special_token_ids, tokenizer_hash
from jaxbert.errors import InputError, require
from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.fs import publish_dir

FORMAT_VERSION = 1
FORMATS = ("mlm", "nsp")
# How mlm rows are made (jaxbert.data.packing): stream (documents joined with [SEP], cut into rows;
# the default, recorded by its absence), documents (whole documents share rows, with segment ids),
# none (one document, or piece of a long one, per padded row, with segment ids).
PACKINGS = ("stream", "documents", "none")
DATASET_KIND = "dataset"  # what prepare publishes (fs.publish_dir)

class PrepareError(InputError):
    """Bad arguments or an output that cannot be written."""


def _start_method() -> str:
    """fork for a single-threaded process that has not started JAX (whose threads are native), else spawn."""
    jax_started = bool(getattr(sys.modules.get("jax._src.xla_bridge"), "_backends", None))
    single = threading.active_count() == 1 and not jax_started
    return "fork" if single and "fork" in mp.get_all_start_methods() else "spawn"


def _run(tasks, config: dict, num_workers: int):
    """Results in task order, at most 2 chunks per worker in flight (memory stays bounded).

    Workers are forked where the OS can (fast, and no re-import of the caller's script, which
    `spawn` runs again) while this process runs a single thread; once it has started JAX or any
    other thread (gcsfs's event loop for gs:// paths, Beam's pools), a forked child could inherit
    a lock held mid-operation, so workers are spawned. Workers use only NumPy and tokenizers. A
    worker that dies raises BrokenProcessPool here instead of hanging.
    """
    if num_workers <= 1:
        init_worker(config)
        yield from map(encode_chunk, tasks)
        return
    with ProcessPoolExecutor(num_workers, mp.get_context(_start_method()), init_worker, (config,)) as pool:
        pending = deque()
        for task in tasks:
            pending.append(pool.submit(encode_chunk, task))
            if len(pending) >= 2 * num_workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


class _ShardWriter:
    """Buffers rows of one split and writes `{split}-{i:05d}.npy` every `rows_per_shard` rows."""

    def __init__(self, folder: Path, split: str, rows_per_shard: int, nsp: bool, segments: bool = False):
        self.folder, self.split, self.rows_per_shard, self.nsp = folder, split, rows_per_shard, nsp
        self.with_segments = segments
        self.rows, self.pairs, self.segments, self.buffered, self.shards = [], [], [], 0, []
        self.documents = self.tokens = self.examples = self.padding = self.random_next = 0

    def add(self, rows: np.ndarray, pairs: np.ndarray | None = None, segments: np.ndarray | None = None) -> None:
        self.rows.append(rows)
        if pairs is not None:
            self.pairs.append(pairs)
        if segments is not None:
            self.segments.append(segments)
        self.buffered += len(rows)
        while self.buffered >= self.rows_per_shard:
            self._write(self.rows_per_shard)

    def _write(self, n: int) -> None:
        rows = np.concatenate(self.rows)
        name = f"{self.split}-{len(self.shards):05d}"
        np.save(self.folder / f"{name}.npy", rows[:n])
        self.rows = [rows[n:]]
        if self.nsp:
            pairs = np.concatenate(self.pairs)
            np.save(self.folder / f"{name}-pairs.npy", pairs[:n])
            self.pairs = [pairs[n:]]
        if self.with_segments:
            segments = np.concatenate(self.segments)
            np.save(self.folder / f"{name}-segments.npy", segments[:n])
            self.segments = [segments[n:]]
        self.buffered -= n
        self.examples += n
        self.shards.append({"file": f"{name}.npy", "rows": n})

    def close(self) -> dict:
        if self.buffered:
            self._write(self.buffered)
        info = {"examples": self.examples, "documents": self.documents, "tokens": self.tokens,
                "shards": self.shards}
        if self.nsp:
            info["random_next"] = self.random_next
        else:
            info["padding_tokens"] = self.padding
        return info


def _show_counts(bar, writers: dict) -> None:
    bar.set_postfix(docs=sum(w.documents for w in writers.values()),
                    rows=sum(w.examples + w.buffered for w in writers.values()), refresh=False)


def _check_not_near_a_workdir(output: str, for_workdir: str | None) -> None:
    """PrepareError naming both when the output would lie in a training workdir or hold one."""
    own = fs.as_path(for_workdir) if for_workdir is not None else None
    if own is not None and os.fspath(fs.as_path(output)) == os.fspath(workdir_lib.path(own, workdir_lib.DATA)):
        return
    for wd in workdir_lib.workdirs_near(output, depth=2):
        out = fs.as_path(output)
        where = ("is the training workdir" if wd == out else
                 "is inside the training workdir" if wd in out.parents else "holds the training workdir")
        raise PrepareError(f"--output {out} {where} {wd}; prepared data goes in a folder of its own "
                           "(replacing it with --overwrite would take the run's files with it)")


def _check_readers(corpus: Corpus) -> None:
    """The optional libraries the inputs' formats need (pyarrow for parquet and Arrow files), imported now:
    an InputError naming the first file that needs a missing one comes before any work."""
    for fmt, path in corpus.sources or ():
        if fmt in ("parquet", "arrow"):
            require("pyarrow.parquet", "data", f"reading {path}")


def prepare(inputs: list[str] | None, tokenizer: str, output: str, max_length: int = 128,
            format: str = "mlm", validation_fraction: float = 0.01, text_field: str = "text",
            seed: int = 0, num_workers: int | None = None, *, short_seq_prob: float = 0.1,
            rows_per_shard: int | None = None, progress: bool = True, overwrite: bool = False,
            for_workdir: str | None = None, packing: str = "stream", runner: str = "local",
            pipeline_options: str | None = None) -> dict:
    """Tokenize `inputs` (None: the embedded Python-docs corpus) into shards in `output`.

    Returns the metadata dict also written to `output/metadata.json`. The output folder is
    built beside `output` and swapped in only when complete; an existing `output` is
    replaced only when it is an earlier prepared dataset and `overwrite` is set. `output` may
    not lie inside a training workdir nor hold one, except WORKDIR/data of `for_workdir` (the
    data a run builds for itself).

    packing (mlm only): "stream" joins documents into one stream cut into rows; "documents" packs
    whole documents into rows with segment ids (attention and positions kept within each);
    "none" gives each document its own padded row (see jaxbert.data.packing).

    runner: "local" (worker processes on this machine) or a Beam runner (jaxbert.data.beam.RUNNERS:
    direct, dataflow, flink, spark) with its `pipeline_options` (one string, as on a command line);
    both write the same files for the same inputs and arguments. With the DirectRunner,
    `num_workers` is its number of processes.
    """
    _check_not_near_a_workdir(output, for_workdir)
    if format not in FORMATS:
        raise PrepareError(f"format must be one of {FORMATS}, got {format!r}")
    if packing not in PACKINGS:
        raise PrepareError(f"packing must be one of {PACKINGS}, got {packing!r}")
    if format == "nsp" and packing != "stream":
        raise PrepareError(f"packing {packing!r} is for mlm rows; nsp rows are sentence pairs of one document")
    if not 0.0 <= validation_fraction < 1.0:
        raise PrepareError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    low = 3 if format == "mlm" else 5
    if max_length < low or max_length > 65535:
        raise PrepareError(f"max_length {max_length} is out of range for format {format!r}: "
                           f"expected {low} to 65535 tokens")
    tok = load_tokenizer(tokenizer)
    specials = special_token_ids(tok, tokenizer)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.uint32
    # bad runner arguments (options for the local runner, options Beam does not know) fail before any work
    pipeline_args(runner, pipeline_options, num_workers, embedded=inputs is None)
    corpus = Corpus(inputs, text_field, fetch=runner in ("local", "direct"))
    _check_readers(corpus)  # a missing reader is refused before the progress line, like any bad input
    total = corpus.total()
    if num_workers is None:
        num_workers = os.cpu_count() or 1
    if total < 2 * CHUNK_CHARS:  # starting processes would cost more than it saves
        num_workers = 1
    config = {"tokenizer_json": tok.to_str(), "dtype": np.dtype(dtype).name, "format": format,
              "max_length": max_length, "validation_fraction": validation_fraction, "seed": seed,
              "special_ids": specials, "short_seq_prob": short_seq_prob}
    rows_per_shard = rows_per_shard or max(1, (1 << 27) // (max_length * np.dtype(dtype).itemsize))
    with publish_dir(output, DATASET_KIND, overwrite, sources=(tokenizer, *(inputs or ()))) as tmp:
        tmp = Path(tmp)
        nsp = format == "nsp"
        segmented = packing != "stream"
        writers = {s: _ShardWriter(tmp, s, rows_per_shard, nsp, segmented) for s in SPLITS}
        if segmented:
            packers = {s: DocumentPacker(max_length, specials["cls"], specials["sep"], specials["pad"], dtype,
                                         one_per_row=packing == "none") for s in SPLITS}
        else:
            packers = {s: MLMPacker(max_length, specials["cls"], specials["sep"], specials["pad"], dtype)
                       for s in SPLITS}
        bar = progress_bar(total, "prepare", unit="B", unit_scale=True, file=sys.stderr, disable=not progress)
        encoder = None
        try:
            if runner == "local":
                results = _run(chunks(corpus), config, num_workers)
            else:
                encoder = BeamEncoder(corpus, config, runner, pipeline_options, num_workers, quiet=not progress)
                corpus.stats = [SourceStats(**s) for s in encoder.stats]
                results = iter(encoder)
            for res in results:
                for split, w in writers.items():
                    if nsp:
                        rows, a_len, labels, ntok, ndocs = res[split]
                        w.add(rows, np.stack([a_len, labels], 1).astype(np.uint16))
                        w.random_next += int(labels.sum())
                    else:
                        tokens, lengths = res[split]
                        out = packers[split].add(tokens, lengths)
                        w.add(*((out[0], None, out[1]) if segmented else (out,)))
                        ntok, ndocs = int(lengths.sum()), int((lengths > 0).sum())
                    w.tokens += ntok
                    w.documents += ndocs
                bar.update(res["units"])
                _show_counts(bar, writers)
            if not nsp:  # the last rows, still in the packers
                for split, w in writers.items():
                    out = packers[split].finish()
                    w.add(*((out[0], None, out[1]) if segmented else (out,)))
                    w.padding = packers[split].padding
            _show_counts(bar, writers)
            bar.update(max(0, total - bar.n))
        finally:  # a failure's message then starts on a line of its own
            bar.close()
            if encoder is not None:
                encoder.close()
        splits = {s: w.close() for s, w in writers.items()}
        if splits["train"]["examples"] == 0:
            raise PrepareError("no training examples: the corpus tokenized to nothing, or "
                               "validation_fraction took every document")
        meta = {
            "format_version": FORMAT_VERSION, "format": format, "max_length": max_length,
            "dtype": np.dtype(dtype).name, "vocab_size": vocab_size, "special_ids": specials,
            "tokenizer_hash": tokenizer_hash(tok), "tokenizer": str(tokenizer),
            "inputs": None if inputs is None else [str(i) for i in inputs],
            "text_field": text_field, "seed": seed, "validation_fraction": validation_fraction,
            "counts": {k: sum(s[k] for s in splits.values()) for k in ("documents", "tokens", "examples")},
            "splits": splits, "sources": [s.as_dict() for s in corpus.stats], "warnings": corpus.warnings(),
        }
        if nsp:
            meta["short_seq_prob"] = short_seq_prob
        if segmented:  # stream data (and data from before this option) records none: the loader reads it so
            meta["packing"] = packing
        (tmp / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
        (tmp / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    if progress:
        for line in meta["warnings"]:
            print(f"warning: {line}", file=sys.stderr)
    return meta
