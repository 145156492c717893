"""Rows of a prepared shard (.npy, fixed-length rows) read where it lies.

A local shard is memory-mapped. A shard in a bucket is read by byte ranges: the
header once, then for each batch the rows asked for, rows less than COALESCE_BYTES
(64 KiB) apart merged into one request, so that a host reads its own share of the data
(plus at most that gap per request), with no copy of the dataset per host. With ``cache_dir`` (or the JAXBERT_DATA_CACHE
variable) each shard fetched whole once is kept on local disk instead, for runs
that go over the data many times on hosts with room for it.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
import threading

import numpy as np

from jaxbert import fs

_HEADER_BYTES = 1 << 16  # an .npy header is far smaller; read in one request
# Rows closer than this are fetched in one request, the gap read and dropped. Small, so that a host
# never reads much beyond its share (requests run concurrently, so their count matters less than
# bytes), yet enough that the rows of a small dataset come in a few requests.
COALESCE_BYTES = 64 << 10


def open_rows(path, cache_dir: str | None = None):
    """An array-like [N, ...] of the rows in the .npy at `path` (local or URL)."""
    if not fs.is_url(path):
        return np.load(os.fspath(path), mmap_mode="r")
    cache_dir = cache_dir or os.environ.get("JAXBERT_DATA_CACHE")
    if cache_dir:
        return np.load(_cached(path, Path(cache_dir)), mmap_mode="r")
    return RemoteRows(path)


class RemoteRows:
    """Fancy indexing over an .npy in a bucket: ``rows[idx]`` for an int array or slice."""

    def __init__(self, path):
        self.path = fs.as_path(path)
        self._fs, self._key = fs.filesystem(self.path)
        head = self._fs.cat_file(self._key, start=0, end=_HEADER_BYTES)
        shape, fortran, dtype, offset = _parse_header(head, str(self.path))
        if fortran:
            raise ValueError(f"{self.path}: a Fortran-ordered array; prepared shards are C-ordered")
        self.shape, self.dtype, self._offset = shape, dtype, offset
        self._row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        self._lock = threading.Lock()  # the loader's prefetch thread and the main thread may both read

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index) -> np.ndarray:
        if isinstance(index, slice):
            index = np.arange(*index.indices(self.shape[0]))
        index = np.asarray(index, np.int64)
        if index.ndim != 1:
            raise IndexError("RemoteRows takes a 1-D index")
        if index.size and (index.min() < 0 or index.max() >= self.shape[0]):
            raise IndexError(f"row index out of range [0, {self.shape[0]}) in {self.path}")
        out = np.empty((index.size,) + tuple(self.shape[1:]), self.dtype)
        order = np.argsort(index, kind="stable")
        ranges = _runs(index[order], max(1, COALESCE_BYTES // max(1, self._row_bytes)))
        with self._lock:
            blobs = self._fs.cat_ranges([self._key] * len(ranges),
                                        [self._offset + a * self._row_bytes for a, _ in ranges],
                                        [self._offset + b * self._row_bytes for _, b in ranges])
        pos = 0
        for (a, b), blob in zip(ranges, blobs):
            if isinstance(blob, Exception):
                raise blob
            rows = np.frombuffer(blob, self.dtype).reshape((b - a,) + tuple(self.shape[1:]))
            # each sorted index value in [a, b) picks its row from this block (gap rows are dropped)
            take = index[order[pos:]]
            n = int(np.searchsorted(take, b, side="left"))
            out[order[pos:pos + n]] = rows[take[:n] - a]
            pos += n
        return out


def _runs(sorted_index: np.ndarray, max_gap: int = 1) -> list[tuple[int, int]]:
    """[start, end) row ranges covering the sorted indices; rows less than max_gap apart share one."""
    if sorted_index.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_index) > max_gap)
    starts = np.concatenate([[sorted_index[0]], sorted_index[breaks + 1]])
    ends = np.concatenate([sorted_index[breaks], [sorted_index[-1]]]) + 1
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def _parse_header(head: bytes, name: str):
    """(shape, fortran_order, dtype, data offset) from the first bytes of an .npy file."""
    f = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(f)
        reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        shape, fortran, dtype = reader[version](f)
    except (ValueError, KeyError) as e:
        raise ValueError(f"{name} is not a readable .npy file: {e}") from None
    return shape, fortran, np.dtype(dtype), f.tell()


def _cached(path, cache_dir: Path) -> Path:
    """A local copy of the shard at `path` in cache_dir, fetched once (keyed by URL and size)."""
    filesystem, key = fs.filesystem(path)
    size = filesystem.size(key)
    tag = hashlib.sha256(f"{os.fspath(path)}:{size}".encode()).hexdigest()[:16]
    local = cache_dir / f"{tag}-{fs.as_path(path).name}"
    if not local.exists() or local.stat().st_size != size:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(local.name + f".tmp-{os.getpid()}")
        filesystem.get(key, str(tmp))
        os.replace(tmp, local)
    return local
