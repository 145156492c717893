"""Which source each row of a mixture's stream comes from: a seeded schedule, readable at any position.

Sources get shares: positive integers proportional to their weights (``shares``), or to their
sizes to a power tau (``temperature_weights``, as mmBERT samples languages). The stream's rows are
seats handed out by a divisor method (Sainte-Laguë): seat j of source i falls at time
(2j + 1) / (2 w_i) (in units of W / sum of shares), and the stream takes seats in order of time,
ties to the lower source. So the first H rows hold ``seats(H)[i]`` rows of source i, within one
row of H * w_i / W, and the count never falls as H grows. ``seats(H)`` is exact integer
arithmetic in O(n log n) for n sources at any H: no replay of the stream.

The stream is cut into blocks of B rows (``block_rows``); block b holds seats(bB + B) - seats(bB) rows of each
source, in an order shuffled by (seed, b). Row k of the stream is then (source, how many rows of
that source came before it), computed from its block alone: a resume at any position, with any
batch size or host count, continues on the same rows.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

import numpy as np

BLOCK = 1024  # rows per shuffled block per 16 sources: the proportions hold to a row at every block boundary


def block_rows(sources: int) -> int:
    """Rows per block: BLOCK, and BLOCK more per 16 sources, so that the O(n log n) count at each
    block boundary stays a small share of the block's work however many sources there are."""
    return BLOCK * -(-sources // 16)
SCALE = 1 << 30  # shares are weights normalised to this sum (coarse enough that libm's last bit never counts)


def shares(weights: Sequence[float]) -> tuple[int, ...]:
    """Positive integers proportional to `weights` (each > 0), summing to about SCALE."""
    total = math.fsum(weights)
    return tuple(max(1, round(w / total * SCALE)) for w in weights)


def temperature_weights(sizes: Sequence[int], tau: float) -> list[float]:
    """p_i proportional to n_i ** tau: tau 1 samples by size, 0 uniformly, between them flattens."""
    return [float(n) ** tau for n in sizes]


class Schedule:
    """Rows of a mixture's stream: ``locate(position, count)`` -> (source, row of that source) for each."""

    def __init__(self, source_shares: Sequence[int], seed: int, block: int | None = None):
        self.shares = tuple(int(w) for w in source_shares)
        if not self.shares or min(self.shares) < 1:
            raise ValueError(f"shares must be positive integers, got {source_shares}")
        self.total, self.seed = sum(self.shares), int(seed)
        self.block = int(block) if block is not None else block_rows(len(self.shares))
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._ends: dict[int, np.ndarray] = {}  # the counts at the start of the block after the last one built

    def seats(self, rows: int) -> np.ndarray:
        """int64 [n]: rows of each source among the first `rows` rows of the stream."""
        w, total, rows = self.shares, self.total, int(rows)
        # seats with time <= rows: j <= (2 rows w_i - W) / 2W; then a few seats more or fewer
        got = [(2 * rows * wi + total) // (2 * total) for wi in w]
        missing = rows - sum(got)  # |missing| <= n / 2: each count is rounded by at most half a seat
        if missing:
            for i in self._boundary_seats(got, missing):
                got[i] += 1 if missing > 0 else -1
        return np.array(got, np.int64)

    def _boundary_seats(self, got: list[int], missing: int) -> list[int]:
        """The sources of the |missing| seats after the first sum(got) (missing > 0: the earliest
        seats not taken) or the last ones taken (missing < 0), in exact order of (time, source).
        Float times pick the few candidates; exact fractions order them (ties included)."""
        w, m, n = np.array(self.shares, np.float64), abs(missing), len(got)
        # the seats sought lie within m + n/2 + 1 rows' time of the boundary: a source has at most
        # (m + n/2 + 1) w_i / W + 1 of them, and never more than m
        per = np.minimum(m, np.floor((m + n / 2 + 1) * w / self.total) + 1).astype(np.int64)
        source = np.repeat(np.arange(n), per)
        step = np.arange(len(source)) - np.repeat(np.cumsum(per) - per, per)
        j = np.array(got, np.float64)[source] + (step if missing > 0 else -1 - step)
        source, j = source[j >= 0], j[j >= 0]
        times = (2 * j + 1) / w[source]
        if missing > 0:
            near = times <= np.partition(times, m - 1)[m - 1] * (1 + 1e-9)
        else:
            near = times >= -np.partition(-times, m - 1)[m - 1] * (1 - 1e-9)
        exact = sorted(((Fraction(2 * int(jj) + 1, self.shares[i]), int(i)) for i, jj in zip(source[near], j[near])),
                       reverse=missing < 0)
        return [i for _, i in exact[:m]]

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source int32 [B], row of that source int64 [B], rows of each source before the block [n])."""
        if b not in self._blocks:
            # a block's end is the next one's start: the previous block's counts serve again
            start = self._ends[b] if b in self._ends else self.seats(b * self.block)
            end = self.seats((b + 1) * self.block)
            self._ends = {b + 1: end}
            counts = end - start
            source = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
            np.random.default_rng([self.seed, b, 0x313C]).shuffle(source)
            # the r-th row of source i in this block is row start[i] + r of source i
            by_source = np.argsort(source, kind="stable")
            first = np.cumsum(counts) - counts  # where each source's rows begin in by_source
            row = np.empty(self.block, np.int64)
            row[by_source] = start[source[by_source]] + np.arange(self.block) - first[source[by_source]]
            self._blocks = {k: v for k, v in self._blocks.items() if k in (b - 1, b + 1)}  # neighbours kept
            self._blocks[b] = source, row, start
        return self._blocks[b]

    def locate(self, position: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(source int32 [count], row of that source int64 [count]) of rows position .. position + count - 1."""
        position, count = int(position), int(count)
        sources, rows = [], []
        k = position
        while k < position + count:
            b, r = divmod(k, self.block)
            take = min(self.block - r, position + count - k)
            source, row, _ = self._block(b)
            sources.append(source[r:r + take])
            rows.append(row[r:r + take])
            k += take
        if not sources:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        return np.concatenate(sources), np.concatenate(rows)

    def consumed(self, position: int) -> np.ndarray:
        """int64 [n]: rows of each source among the first `position` rows of the stream."""
        b, r = divmod(int(position), self.block)
        if r == 0:
            return self.seats(position)
        source, _, start = self._block(b)
        return start + np.bincount(source[:r], minlength=len(self.shares))
