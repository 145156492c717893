"""Fixed-size batches of fine-tuning features, each cut to its own bucket length.

Every batch has the same batch dimension B: the last partial batch is filled with padding rows
whose `valid` weight is 0 (and `index` -1), so a jitted step sees one batch shape per bucket
length. Sequence arrays are cut to the smallest bucket holding the batch's longest row, so a
run compiles at most len(buckets) shapes. Shuffling is a permutation drawn from (seed, epoch):
the same seed and epoch give the same order on any machine.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from jaxbert.finetune.features import Features, bucket_for, bucket_lengths
from jaxbert.finetune.tables import TaskDataError


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """[n] row order for an epoch: arange, or a permutation seeded by (seed, epoch)."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


def n_batches(n: int, batch_size: int, drop_last: bool = False) -> int:
    return n // batch_size if drop_last else -(-n // batch_size)


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
