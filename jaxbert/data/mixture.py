"""Which source each row of a mixture's stream comes from: a seeded schedule, readable at any position.

Sources get shares: positive integers proportional to their weights (``shares``), or to their
sizes to a power tau (``temperature_weights``, as mmBERT samples languages). The stream's rows are
seats handed out by a divisor method (Sainte-Laguë): seat j of source i falls at time
(2j + 1) / (2 w_i) (in units of W / sum of shares), and the stream takes seats in order of time,
ties to the lower source. So the first H rows hold ``seats(H)[i]`` rows of source i, within one
row of H * w_i / W, and the count never falls as H grows. ``seats(H)`` is exact integer
arithmetic in O(n log n) for n sources at any H: no replay of the stream.

The stream is cut into blocks of BLOCK rows; block b holds seats(bB + B) - seats(bB) rows of each
source, in an order shuffled by (seed, b). Row k of the stream is then (source, how many rows of
that source came before it), computed from its block alone: a resume at any position, with any
batch size or host count, continues on the same rows.
"""

from __future__ import annotations

import heapq
import math
from fractions import Fraction
from typing import Sequence

import numpy as np

BLOCK = 1024  # rows per shuffled block: the proportions hold to a row at every block boundary
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

    def __init__(self, source_shares: Sequence[int], seed: int, block: int = BLOCK):
        self.shares = tuple(int(w) for w in source_shares)
        if not self.shares or min(self.shares) < 1:
            raise ValueError(f"shares must be positive integers, got {source_shares}")
        self.total, self.seed, self.block = sum(self.shares), int(seed), int(block)
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def seats(self, rows: int) -> np.ndarray:
        """int64 [n]: rows of each source among the first `rows` rows of the stream."""
        w, total, rows = self.shares, self.total, int(rows)
        # seats with time <= rows: j <= (2 rows w_i - W) / 2W; then a few seats more or fewer
        got = [(2 * rows * wi + total) // (2 * total) for wi in w]
        missing = rows - sum(got)  # |missing| <= n / 2: each count is rounded by at most half a seat
        if missing > 0:  # the next seats after time `rows`, earliest (then lowest source) first
            heap = [(Fraction(2 * got[i] + 1, wi), i) for i, wi in enumerate(w)]
            heapq.heapify(heap)
            for _ in range(missing):
                _, i = heapq.heappop(heap)
                got[i] += 1
                heapq.heappush(heap, (Fraction(2 * got[i] + 1, w[i]), i))
        elif missing < 0:  # give back the latest seats taken (ties: the highest source last)
            heap = [(-Fraction(2 * got[i] - 1, wi), -i) for i, wi in enumerate(w) if got[i] > 0]
            heapq.heapify(heap)
            for _ in range(-missing):
                _, i = heapq.heappop(heap)
                got[-i] -= 1
                if got[-i] > 0:
                    heapq.heappush(heap, (-Fraction(2 * got[-i] - 1, w[-i]), i))
        return np.array(got, np.int64)

    def _block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(source int32 [B], row of that source int64 [B]) for the rows of block b."""
        if b not in self._blocks:
            start, end = self.seats(b * self.block), self.seats((b + 1) * self.block)
            counts = end - start
            source = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
            np.random.default_rng([self.seed, b, 0x313C]).shuffle(source)
            # the r-th row of source i in this block is row start[i] + r of source i
            by_source = np.argsort(source, kind="stable")
            first = np.cumsum(counts) - counts  # where each source's rows begin in by_source
            row = np.empty(self.block, np.int64)
            row[by_source] = start[source[by_source]] + np.arange(self.block) - first[source[by_source]]
            self._blocks = {k: v for k, v in self._blocks.items() if k in (b - 1, b + 1)}  # neighbours kept
            self._blocks[b] = source, row
        return self._blocks[b]

    def locate(self, position: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(source int32 [count], row of that source int64 [count]) of rows position .. position + count - 1."""
        position, count = int(position), int(count)
        sources, rows = [], []
        k = position
        while k < position + count:
            b, r = divmod(k, self.block)
            take = min(self.block - r, position + count - k)
            source, row = self._block(b)
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
        source, _ = self._block(b)
        return self.seats(b * self.block) + np.bincount(source[:r], minlength=len(self.shares))
