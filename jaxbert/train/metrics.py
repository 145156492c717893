"""Metric sinks for a training workdir, and the FLOPs estimate behind MFU.

``MetricsWriter`` appends one JSON object per line to WORKDIR/metrics.jsonl and
writes the same scalars as TensorBoard event files under WORKDIR/tensorboard
(a TFRecord of Event protos, encoded here so that neither TensorFlow nor
tensorboard is a dependency).
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import struct
import time
from pathlib import Path

from jaxbert import fs
from jaxbert.model.flops import peak_flops, train_flops_per_token  # noqa: F401 (re-exported)

def flops_per_token(cfg, params, seq_len: int, masked_fraction: float) -> float:
    """Training FLOPs per token (DESIGN.md); ``params`` is unused, kept for callers."""
    del params
    return train_flops_per_token(cfg, seq_len, masked_fraction)


class MetricsWriter:
    """Only the primary process writes; the others pass active=False."""

    def __init__(self, workdir: str | Path, active: bool = True, upload_every_s: float = 30.0):
        self.active = active
        if not active:
            return
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._remote = None
        if fs.is_url(workdir):  # a bucket cannot append: write locally, upload whole files now and then
            self._remote = (fs.as_path(workdir), name, upload_every_s)
            self._uploaded = time.time()
            self._local = Path(tempfile.mkdtemp(prefix="jaxbert-metrics-"))
            old = fs.as_path(workdir) / "metrics.jsonl"
            if old.exists():
                (self._local / "metrics.jsonl").write_bytes(old.read_bytes())
            workdir = self._local
        workdir = Path(workdir)
        self._jsonl = open(workdir / "metrics.jsonl", "a", buffering=1)
        tb = workdir / "tensorboard"
        tb.mkdir(parents=True, exist_ok=True)
        self._events = open(tb / name, "ab")
        self._record(_event(time.time(), 0, file_version="brain.Event:2"))

    def write(self, step: int, scalars: dict) -> None:
        if not self.active:
            return
        self._jsonl.write(json.dumps({"step": step, **scalars}) + "\n")
        values = {k: v for k, v in scalars.items() if isinstance(v, (int, float))}
        self._record(_event(time.time(), step, values=values))
        self._events.flush()
        if self._remote is not None and time.time() - self._uploaded >= self._remote[2]:
            self.flush()

    def flush(self) -> None:
        """Make what was written so far visible in a URL workdir (a checkpoint save calls it)."""
        if not self.active or self._remote is None:
            return
        self._jsonl.flush()
        self._events.flush()
        root, name, _ = self._remote
        fs.atomic_write_bytes(root / "metrics.jsonl", (self._local / "metrics.jsonl").read_bytes())
        fs.atomic_write_bytes(root / "tensorboard" / name, (self._local / "tensorboard" / name).read_bytes())
        self._uploaded = time.time()

    def close(self) -> None:
        if self.active:
            self.flush()
            self._jsonl.close()
            self._events.close()
            if self._remote is not None:
                shutil.rmtree(self._local, ignore_errors=True)

    def _record(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        self._events.write(header + struct.pack("<I", _masked_crc(header)) + data
                           + struct.pack("<I", _masked_crc(data)))


def read_metrics(workdir: str | Path) -> list[dict]:
    path = fs.as_path(workdir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {workdir} a training workdir?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- TensorBoard event encoding (protobuf wire format by hand) -------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, values: dict | None = None, file_version: str | None = None) -> bytes:
    # Event: 1 wall_time (double), 2 step (int64), 3 file_version, 5 summary.
    out = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)
    if file_version:
        out += _field(3, file_version.encode())
    if values:
        # Summary.value (1) -> Value: 1 tag, 2 simple_value (float32).
        summary = b"".join(_field(1, _field(1, k.encode()) + b"\x15" + struct.pack("<f", v))
                           for k, v in values.items())
        out += _field(5, summary)
    return out


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # CRC-32C (Castagnoli)
        table.append(crc)
    return table


_TABLE = _crc_table()


def _masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
