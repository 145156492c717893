"""Fixed-size batches of fine-tuning features, each cut to its own bucket length.

Every batch has the same batch dimension B: the last partial batch is filled with padding rows
whose `valid` weight is 0 (and `index` -1), so a jitted step sees one batch shape per bucket
length. Sequence arrays are cut to the smallest bucket holding the batch's longest row, so a
run compiles at most len(buckets) shapes. Shuffling is a permutation drawn from (seed, epoch):
the same seed and epoch give the same order on any machine.

Because the order is known before the first step, so is every batch's longest row:
`plan_buckets` chooses the bucket lengths from them (multiples of 8, as many as the
power-of-two rule would use at most), so short-sentence tasks are not padded to 32.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from jaxbert.finetune.features import Features, bucket_for, bucket_lengths
from jaxbert.finetune.row_files import TaskDataError


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """[n] row order for an epoch: arange, or a permutation seeded by (seed, epoch)."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


def n_batches(n: int, batch_size: int, drop_last: bool = False) -> int:
    return n // batch_size if drop_last else -(-n // batch_size)


def batch_maxima(lengths: np.ndarray, batch_size: int, seed: int = 0, epochs: int = 1,
                 shuffle: bool = False, drop_last: bool = False) -> np.ndarray:
    """The longest row of every batch `batches` yields over epochs 0..epochs-1 (same order, same cut)."""
    lengths = np.asarray(lengths)
    n, out = len(lengths), []
    k = n_batches(n, batch_size, drop_last)
    for epoch in range(epochs):
        ordered = lengths[epoch_order(n, seed, epoch, shuffle)][:k * batch_size]
        full = np.zeros(k * batch_size, lengths.dtype)
        full[:len(ordered)] = ordered  # the short last batch: 0 stands for its padding rows
        out.append(full.reshape(k, batch_size).max(axis=1))
    return np.concatenate(out) if out else np.zeros(0, lengths.dtype)


BUCKET_MULTIPLE = 8


def plan_buckets(maxima, max_length: int, limit: int | None = None, multiple: int = BUCKET_MULTIPLE) -> tuple[int, ...]:
    """Bucket lengths for batches whose longest rows are `maxima`: at most `limit` lengths
    (default: as many as bucket_lengths(max_length) has), each a multiple of `multiple` or
    max_length, chosen so that the batches' padded length summed over all batches is smallest.

    The powers of two are one of the choices considered, so the plan never pads more nor
    compiles more shapes than they do; a task of short sentences gets one bucket near them.
    """
    limit = limit or len(bucket_lengths(max_length))
    rounded = np.minimum(-(-np.maximum(np.asarray(maxima, np.int64), 1) // multiple) * multiple, max_length)
    if rounded.size == 0:
        return (max_length,)
    values, counts = np.unique(rounded, return_counts=True)
    m = len(values)
    # best[j][i]: least padded length of the batches with the i smallest values, using j buckets,
    # the last one at values[i-1]; from[j][i] the previous cut
    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(limit + 1)]
    cut = [[0] * (m + 1) for _ in range(limit + 1)]
    best[0][0] = 0.0
    for j in range(1, limit + 1):
        for i in range(1, m + 1):
            for k in range(i):  # values[k:i] go to the bucket values[i-1]
                c = best[j - 1][k] + float(values[i - 1]) * float(counts[k:i].sum())
                if c < best[j][i]:
                    best[j][i], cut[j][i] = c, k
    j = min(range(1, limit + 1), key=lambda jj: (best[jj][m], jj))
    out, i = [], m
    while i > 0:
        out.append(int(values[i - 1]))
        i, j = cut[j][i], j - 1
    return tuple(sorted(out))


def buckets_for(features: Features, batch_size: int, seed: int = 0, epochs: int = 1, shuffle: bool = False,
                drop_last: bool = False) -> tuple[int, ...]:
    """plan_buckets for the batches `batches(features, batch_size, shuffle, seed, epoch)` yields over
    epochs 0..epochs-1."""
    maxima = batch_maxima(features.lengths, batch_size, seed, epochs, shuffle, drop_last)
    return plan_buckets(maxima, features.max_length)


def batches(features: Features, batch_size: int, shuffle: bool = False, seed: int = 0, epoch: int = 0,
            buckets: Sequence[int] | None = None, drop_last: bool = False) -> Iterator[dict[str, np.ndarray]]:
    """Dicts of every array in `features` with B = batch_size rows, plus valid [B] float32 and index [B] int32.

    Arrays named in features.seq_keys are cut on their last axis to the batch's bucket length.
    Padding rows copy each array's pad value (features.pad_values, else 0).
    """
    if batch_size < 1:
        raise TaskDataError(f"batch_size must be positive, got {batch_size}")
    buckets = tuple(sorted(buckets)) if buckets else bucket_lengths(features.max_length)
    order = epoch_order(len(features), seed, epoch, shuffle)
    for b in range(n_batches(len(order), batch_size, drop_last)):
        rows = order[b * batch_size:(b + 1) * batch_size]
        n_real = len(rows)
        length = min(bucket_for(int(features.lengths[rows].max()), buckets), features.length)
        batch = {}
        for key, array in features.arrays.items():
            part = array[rows]
            if key in features.seq_keys:
                part = part[..., :length]
            if n_real < batch_size:
                fill = np.full((batch_size - n_real, *part.shape[1:]), features.pad_values.get(key, 0), part.dtype)
                part = np.concatenate([part, fill])
            batch[key] = part
        batch["valid"] = (np.arange(batch_size) < n_real).astype(np.float32)
        batch["index"] = np.concatenate([rows, np.full(batch_size - n_real, -1)]).astype(np.int32)
        yield batch
