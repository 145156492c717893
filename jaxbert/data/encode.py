"""Documents -> chunks -> token ids: the unit of work that `prepare` spreads over workers.

Documents are cut into chunks in input order (a chunk closes at CHUNK_CHARS characters or
CHUNK_DOCS documents), whatever the number of workers or the runner, and each chunk is encoded
on its own: the ids of its documents per split (mlm), or its nsp sentence pairs drawn with a
generator seeded by (seed, chunk index, split). A chunk's result therefore depends only on its
documents, its index and the index of its first document, so any runner that encodes the same
chunks and hands the results over in chunk order writes the same files.
"""

from __future__ import annotations

import itertools
import os
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer

from jaxbert.data.packing import nsp_examples, split_sentences

SPLITS = ("train", "validation")
CHUNK_CHARS = 1 << 19  # documents per work unit: ~512k characters, or
CHUNK_DOCS = 2048

_worker: dict = {}


def is_validation(doc_index: np.ndarray, fraction: float) -> np.ndarray:
    """bool per document: systematic sampling, exactly round(n * fraction) of the first n."""
    i = np.asarray(doc_index, np.float64)
    return np.floor((i + 1) * fraction + 0.5) > np.floor(i * fraction + 0.5)


def init_worker(config: dict) -> None:
    """Set up this process to encode chunks (config: what `prepare` passes; see encode_chunk)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    _worker.clear()
    _worker.update(config, tokenizer=Tokenizer.from_str(config["tokenizer_json"]))


def encode_chunk(task):
    """Tokenize one chunk; per split, mlm: (tokens, doc lengths); nsp: (rows, a_lengths, labels, tokens, docs)."""
    index, docs, first_doc, units = task
    w = _worker
    tok, dtype, fmt = w["tokenizer"], np.dtype(w["dtype"]), w["format"]
    val = is_validation(np.arange(first_doc, first_doc + len(docs)), w["validation_fraction"])
    out = {"index": index, "units": units, "documents": len(docs)}
    for split, mine in zip(SPLITS, (~val, val)):
        texts = [d for d, m in zip(docs, mine) if m]
        if fmt == "mlm":
            encs = tok.encode_batch(texts, add_special_tokens=False) if texts else []
            lengths = np.fromiter((len(e.ids) for e in encs), np.int64, len(encs))
            tokens = np.fromiter(itertools.chain.from_iterable(e.ids for e in encs), dtype, int(lengths.sum()))
            out[split] = (tokens, lengths)
        else:
            sentences = [split_sentences(t) for t in texts]
            flat = [s for doc in sentences for s in doc]
            encs = tok.encode_batch(flat, add_special_tokens=False) if flat else []
            ids = [np.asarray(e.ids, dtype) for e in encs]
            bounds = np.cumsum([0] + [len(s) for s in sentences])
            per_doc = [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            rng = np.random.default_rng([w["seed"], index, SPLITS.index(split)])
            s = w["special_ids"]
            rows, a_len, labels = nsp_examples(per_doc, w["max_length"], rng, s["cls"], s["sep"], s["pad"],
                                               w["short_seq_prob"], dtype)
            out[split] = (rows, a_len, labels, sum(len(i) for i in ids), sum(map(bool, per_doc)))
    return out


def chunks(documents: Iterable[tuple[str, int]]) -> Iterator[tuple[int, list, int, int]]:
    """(chunk index, documents, index of its first document, progress units)."""
    docs, chars, units, first, index = [], 0, 0, 0, 0
    for doc, u in documents:
        docs.append(doc)
        chars += len(doc)
        units += u
        if chars >= CHUNK_CHARS or len(docs) >= CHUNK_DOCS:
            yield index, docs, first, units
            index, first = index + 1, first + len(docs)
            docs, chars, units = [], 0, 0
    if docs:
        yield index, docs, first, units


def chunk_starts(lengths: np.ndarray) -> np.ndarray:
    """The index of each chunk's first document, from every document's length in characters.

    The same cut as `chunks`, from lengths alone: a runner that reads its inputs in parallel
    plans the chunks without holding the documents.
    """
    starts, chars, count = [0], 0, 0
    for i, n in enumerate(np.asarray(lengths, np.int64).tolist()):
        chars += n
        count += 1
        if chars >= CHUNK_CHARS or count >= CHUNK_DOCS:
            starts.append(i + 1)
            chars = count = 0
    if starts[-1] == len(lengths) and len(starts) > 1:
        starts.pop()
    return np.asarray(starts, np.int64)
