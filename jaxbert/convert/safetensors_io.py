"""A streaming reader and writer of the safetensors format.

The format is an 8-byte little-endian header length, a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``
and the raw little-endian tensor bytes. Reading one tensor at a time with
``readinto`` (not mmap) keeps the page cache out of the process's RSS; writing
one tensor at a time lets a shard be written without a second copy of the
model. bf16 uses ml_dtypes, so bf16 tensors round-trip bit for bit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
from pathlib import Path
from typing import Iterable, Iterator

import ml_dtypes
import numpy as np
from jaxbert.errors import InputError

DTYPES = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in DTYPES.items()}
_MAX_HEADER = 100 * 2**20


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """np.empty whose data starts on a 64-byte boundary.

    XLA's CPU client adopts such a buffer in jax.device_put instead of copying
    it, so NumPy params become jax params without a second copy of the model.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buf = np.empty(nbytes + align, np.uint8)
    start = -buf.ctypes.data % align
    return buf[start:start + nbytes].view(dtype).reshape(shape)


def is_aligned(array: np.ndarray, align: int = 64) -> bool:
    return array.flags.c_contiguous and array.ctypes.data % align == 0


def _dim(x) -> int:
    """A header integer: a JSON int (a bool, float or string is refused)."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(x)
    return x


class SafetensorsError(InputError, OSError):
    """A safetensors file that cannot be read; the message names the file."""


class SafetensorsReader:
    """Open one file, check its header against its size, read tensors one by one."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._f = open(self.path, "rb")
        except OSError as e:
            raise SafetensorsError(f"cannot open safetensors file {self.path}: {e}") from e
        size = os.fstat(self._f.fileno()).st_size
        head = self._f.read(8)
        if len(head) < 8:
            self._fail(f"is {size} bytes long, too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, _MAX_HEADER):
            self._fail(f"header length {n} exceeds the file ({size} bytes): truncated or not safetensors")
        try:
            header = json.loads(self._f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self._fail(f"header is not valid JSON ({e}): corrupt or not safetensors")
        except RecursionError:
            self._fail("header is nested too deeply: not safetensors")
        if not isinstance(header, dict):
            self._fail("header is not a JSON object")
        self.metadata = header.pop("__metadata__", None) or {}
        self._start = 8 + n
        self.entries = {}
        ranges = []
        for name, info in header.items():
            try:
                dtype = DTYPES[info["dtype"]]
                shape = tuple(_dim(d) for d in info["shape"])
                begin, stop = (_dim(x) for x in info["data_offsets"])
            except (KeyError, TypeError, ValueError):
                self._fail(f"has an unreadable or unsupported header entry for {name!r}: {str(info)[:200]}")
            if any(d < 0 for d in shape) or begin < 0:
                self._fail(f"tensor {name!r} has a negative dimension or offset: shape {shape}, offset {begin}")
            if stop - begin != math.prod(shape) * dtype.itemsize:
                self._fail(f"tensor {name!r} has {stop - begin} bytes for shape {shape} {dtype}")
            self.entries[name] = (dtype, shape, begin)
            ranges.append((begin, stop, name))
        end = 0
        for begin, stop, name in sorted(ranges):  # the format forbids tensors sharing bytes
            if begin < end:
                self._fail(f"tensor {name!r} overlaps the bytes of another tensor (offset {begin} < {end})")
            end = max(end, stop)
        if self._start + end > size:
            self._fail(f"is truncated: its header needs {self._start + end} bytes, the file has {size}")

    def _fail(self, message: str):
        self.close()
        raise SafetensorsError(f"{self.path}: {message}")

    def keys(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple:
        return self.entries[name][1]

    def get(self, name: str) -> np.ndarray:
        """A fresh array holding the tensor (no mmap)."""
        dtype, shape, begin = self.entries[name]
        out = aligned_empty(shape, dtype)
        self._f.seek(self._start + begin)
        got = self._f.readinto(out.reshape(-1).view(np.uint8)) if out.size else 0
        if got != out.nbytes:
            raise SafetensorsError(f"{self.path}: short read for tensor {name!r} ({got} of {out.nbytes} bytes)")
        return out

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def dtype_name(dtype) -> str:
    try:
        return _NAMES[np.dtype(dtype)]
    except KeyError:
        raise SafetensorsError(f"dtype {dtype} cannot be stored in safetensors") from None


def write_safetensors(path: str | Path, specs: list[tuple[str, tuple, object]],
                      tensors: Iterable[tuple[str, np.ndarray]], metadata: dict | None = None) -> int:
    """Write tensors one at a time; ``specs`` (name, shape, dtype) fixes the header first.

    ``tensors`` must yield the names in ``specs`` order. Writes to a temporary
    file and renames it over ``path`` only when complete. Returns the byte count.
    """
    path = Path(path)
    header, offset = {}, 0
    for name, shape, dtype in specs:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        header[name] = {"dtype": dtype_name(dtype), "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header = {"__metadata__": metadata or {"format": "pt"}, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with _naming(path), open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            names = iter(specs)
            for name, array in tensors:
                want, shape, dtype = next(names)
                array = np.ascontiguousarray(array)
                if name != want or array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
                    raise ValueError(f"{path}: tensor {name} {array.shape} {array.dtype} does not match "
                                     f"the planned {want} {tuple(shape)} {np.dtype(dtype)}")
                f.write(array.reshape(-1).view(np.uint8).data)
            if next(names, None) is not None:
                raise ValueError(f"{path}: fewer tensors than planned")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return len(text) + 8 + offset


@contextlib.contextmanager
def _naming(path: Path):
    """An OSError while writing (disk full, file size limit) names the file being written."""
    try:
        yield
    except OSError as e:
        raise OSError(e.errno, f"cannot write it: {e.strerror or e}", str(path)) from e


def iter_safetensors(path: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    with SafetensorsReader(path) as r:
        for name in r.keys():
            yield name, r.get(name)
