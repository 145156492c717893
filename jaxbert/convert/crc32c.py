"""CRC-32C (Castagnoli), as TensorFlow and LevelDB checksum their files; NumPy only.

``crc32c(data)`` is the standard CRC-32C (reflected polynomial 0x82F63B78, init and
final xor 0xFFFFFFFF; ``crc32c(b"123456789") == 0xE3069283``). ``masked`` is the
form TensorFlow stores (``crc32c::Mask``: rotate right by 15 bits, add 0xa282ead8).

Large buffers are split into equal lanes whose CRCs are computed side by side
with one table lookup per byte and lane (a NumPy step per byte of a lane), then
folded together: feeding n zero bytes is a linear map on the 32-bit register,
applied through four 256-entry tables. A few hundred MB take seconds.
"""

from __future__ import annotations

import math

import numpy as np

_POLY = 0x82F63B78
_MASK_DELTA = 0xA282EAD8
_SMALL = 4096  # below this, a plain byte loop


def _make_table() -> np.ndarray:
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = (crc >> np.uint32(1)) ^ (np.uint32(_POLY) * (crc & np.uint32(1)))
    return crc


_TABLE = _make_table()
_TABLE_LIST = [int(x) for x in _TABLE]


def _update(state: int, data) -> int:
    """The raw register after feeding ``data`` (no initial or final inversion)."""
    table = _TABLE_LIST
    for byte in bytes(data):
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state


def _zeros_tables(n: int) -> list[list[int]]:
    """Four byte tables of the linear map 'feed n zero bytes' on the register."""
    basis = np.uint32(1) << np.arange(32, dtype=np.uint32)  # the 32 unit registers, side by side
    for _ in range(n):
        basis = _TABLE[basis & np.uint32(0xFF)] ^ (basis >> np.uint32(8))
    byte = np.arange(256, dtype=np.uint32)
    tables = []
    for k in range(4):
        t = np.zeros(256, np.uint32)
        for bit in range(8):
            t ^= np.where((byte >> np.uint32(bit)) & np.uint32(1), basis[8 * k + bit], np.uint32(0))
        tables.append([int(x) for x in t])
    return tables


def _lanes(state: int, data: np.ndarray) -> tuple[int, int]:
    """(register after the lane-aligned prefix, bytes consumed) for a large uint8 buffer."""
    lane = max(256, math.isqrt(data.size))
    count = data.size // lane
    rows = data[:count * lane].reshape(count, lane)
    regs = np.zeros(count, np.uint32)
    regs[0] = state
    for j in range(lane):
        regs = _TABLE[(regs ^ rows[:, j]) & np.uint32(0xFF)] ^ (regs >> np.uint32(8))
    t0, t1, t2, t3 = _zeros_tables(lane)
    # raw(s, A || B) = Z_len(B)(raw(s, A)) ^ raw(0, B): fold the lanes in order.
    out = 0
    for reg in regs.tolist():
        out = (t0[out & 0xFF] ^ t1[(out >> 8) & 0xFF] ^ t2[(out >> 16) & 0xFF] ^ t3[out >> 24]) ^ reg
    # the first lane started from ``state`` and the fold started from 0 before it: Z(0) = 0, so
    # the first step gives regs[0] exactly.
    return out, count * lane


def crc32c(data, crc: int = 0) -> int:
    """CRC-32C of ``data`` (bytes or an array, read as its raw bytes), continuing from ``crc``."""
    buf = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else \
        np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    state = crc ^ 0xFFFFFFFF
    done = 0
    if buf.size >= _SMALL:
        state, done = _lanes(state, buf)
    state = _update(state, buf[done:].tobytes())
    return state ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    """TensorFlow's crc32c::Mask: what checkpoints and table blocks store."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
