"""Batch-size warmup: the global batch grows over a run's first tokens (ModernBERT: 768 -> 4,608
sequences over its first 50B tokens).

The full batch is per_device_batch_size x devices x accum_steps; during the warmup a step takes only
some of its accum_steps micro-batches. The count for step s (0-based) is a pure function of s:
with C_s the tokens that steps 0 .. s-1 consumed, the target is
    start + (full - start) * min(C_s, warmup_tokens) / warmup_tokens   sequences,
rounded down to whole micro-batches, at least the first step's count and at most accum_steps.
The run reads its train stream one micro-batch at a time, so a change of batch neither skips nor
repeats a row, and a resumed run (its loader position and step restored) draws what an
uninterrupted one would.
"""

from __future__ import annotations


class BatchWarmup:
    """Micro-batches per optimizer step while the batch grows.

    Args:
      start: global batch of the first step, in sequences (rounded down to whole micro-batches, >= 1).
      tokens: tokens over which the batch grows linearly to the full one.
      micro: sequences of one global micro-batch (per_device_batch_size x devices).
      accum: micro-batches of the full batch (train.accum_steps).
      seq_len: tokens per sequence.
    """

    def __init__(self, start: int, tokens: int, micro: int, accum: int, seq_len: int):
        self.start, self.tokens, self.micro, self.accum, self.seq_len = start, tokens, micro, accum, seq_len
        self.first = min(max(start // micro, 1), accum)
        self._counts: list[int] = []  # micro-batches of steps 0, 1, ... up to the first full one
        self._consumed = 0  # tokens of the steps counted so far

    def micro_batches(self, step: int) -> int:
        """Micro-batches of step `step` (0-based: the optimizer updates done before it)."""
        full = self.micro * self.accum
        while len(self._counts) <= step and (not self._counts or self._counts[-1] < self.accum):
            done = min(self._consumed, self.tokens)
            # start + (full - start) * done / tokens sequences, in whole micro-batches (exact integers)
            n = (self.start * self.tokens + (full - self.start) * done) // (self.tokens * self.micro)
            n = min(max(n, self.first), self.accum)
            self._counts.append(n)
            self._consumed += n * self.micro * self.seq_len
        return self._counts[step] if step < len(self._counts) else self.accum

    def sequences(self, step: int) -> int:
        """The global batch of step `step`, in sequences."""
        return self.micro_batches(step) * self.micro
