"""Batch-size warmup: the global batch grows over a run's first tokens (ModernBERT: 768 -> 4,608
sequences over its first 50B tokens).

The full batch is per_device_batch_size x devices x accum_steps; during the warmup a step takes only
some of its accum_steps micro-batches. The count for a step is a pure function of the tokens the run
consumed before it, C:
    start + (full - start) * min(C, warmup_tokens) / warmup_tokens   sequences,
rounded down to whole micro-batches, at least the first step's count and at most accum_steps.
A resumed run continues from the tokens its checkpoint's loader position records (``resume``), so a
resume at another micro-batch size goes on from where the batch had grown to, not from step 0 at the
new size. The run reads its train stream one micro-batch at a time during the warmup, so a change of
batch neither skips nor repeats a row; once the batch is full it reads whole batches again.

Compiled shapes: each step's micro-batches are padded up to a bucket (``bucket``: the first count,
the counts 2^k and 3 x 2^k between it and accum_steps, and accum_steps), the padding weighing nothing
(its masked weights are zero), so a warmup compiles the train step a handful of times (7 for
ModernBERT-base's 2 .. 16) instead of once per count.
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
        self._base = 0  # the step _counts[0] belongs to
        self._counts: list[int] = []  # micro-batches of steps _base, _base + 1, ... up to the first full one
        self._consumed = 0  # tokens consumed before the step after the last one counted
        # 1, 2, 3, 4, 6, 8, 12, 16, ...: each at most 1.5 x the one before, so padding adds under half a
        # step's micro-batches (ModernBERT-base's warmup: 1.11 x its micro-batches, benchmarks/warmup_compiles.py)
        ladder = {m << k for k in range(accum.bit_length()) for m in (2, 3)} | {1}
        self.buckets = sorted({self.first, accum} | {b for b in ladder if self.first < b < accum})

    def resume(self, step: int, consumed_tokens: int) -> None:
        """Go on from a checkpoint: `step` optimizer updates done, having read `consumed_tokens` tokens
        (the loader's position x seq_len), whatever micro-batch size read them."""
        self._base, self._counts, self._consumed = int(step), [], int(consumed_tokens)

    def count(self, consumed_tokens: int) -> int:
        """Micro-batches of a step that starts after `consumed_tokens` tokens were read."""
        full = self.micro * self.accum
        done = min(consumed_tokens, self.tokens)
        # start + (full - start) * done / tokens sequences, in whole micro-batches (exact integers)
        n = (self.start * self.tokens + (full - self.start) * done) // (self.tokens * self.micro)
        return min(max(n, self.first), self.accum)

    def micro_batches(self, step: int) -> int:
        """Micro-batches of step `step` (0-based: the optimizer updates done before it; not before the
        step the run started or resumed at)."""
        if step < self._base:
            raise ValueError(f"step {step} is before step {self._base}, where this warmup was resumed")
        while len(self._counts) <= step - self._base and (not self._counts or self._counts[-1] < self.accum):
            n = self.count(self._consumed)
            self._counts.append(n)
            self._consumed += n * self.micro * self.seq_len
        k = step - self._base
        return self._counts[k] if k < len(self._counts) else self.accum

    def full(self, step: int) -> bool:
        """Whether step `step` and every step after it takes the full batch."""
        return self.micro_batches(step) == self.accum

    def bucket(self, n: int) -> int:
        """The compiled count that serves a step of n micro-batches: the smallest bucket >= n."""
        return next(b for b in self.buckets if b >= n)

    def work(self, first: int, last: int) -> int:
        """Compiled micro-batches of steps first .. last (0-based, inclusive): what those steps cost to run."""
        total, s = 0, first
        while s <= last and not self.full(s):
            total += self.bucket(self.micro_batches(s))
            s += 1
        return total + max(last - s + 1, 0) * self.accum

    def sequences(self, step: int) -> int:
        """The global batch of step `step`, in sequences."""
        return self.micro_batches(step) * self.micro
