"""Vectorised MLM masking: choose tokens (or whole words), then 80% [MASK], 10% random, 10% kept.

Randomness is counter-based: every random number is a hash of (row key, position), and a row key
is a hash of (seed, epoch, example index). So an example is masked the same way whichever batch,
host or step it lands in, a resumed run reproduces it bit for bit, and no generator state exists.

How many tokens a row gets: with n maskable tokens (everything but [CLS], [SEP], [PAD]) and rate
r, k = floor(r*n + u) with u uniform in [0, 1), so E[k] = r*n exactly for every row length. The k
tokens are those with the k smallest random keys. With whole-word masking the same is done over
words (a word is a token plus the `##` continuations after it), so the expected number of masked
tokens is still r*n; a row whose words would overflow the M prediction slots drops its
lowest-priority words.
"""

from __future__ import annotations

import math

import numpy as np

_U64 = np.uint64
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_LOW32 = _U64(0xFFFFFFFF)
_NEVER = _U64(0xFFFFFFFFFFFFFFFF)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a bijective, well-mixing hash of uint64 arrays (in place)."""
    z ^= z >> _U64(30)
    z *= _M1
    z ^= z >> _U64(27)
    z *= _M2
    z ^= z >> _U64(31)
    return z


def row_keys(seed: int, epoch: int, example_index: np.ndarray) -> np.ndarray:
    """uint64 [B] key of each example's random stream."""
    with np.errstate(over="ignore"):
        base = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], _U64) * _GOLDEN + _U64(0x632BE59BD9B4E019))
        base = _mix(base ^ (np.array([epoch], _U64) * _M1))
        return _mix(np.asarray(example_index, _U64) * _GOLDEN + base)


def masked_slots(seq_len: int, mask_rate: float, max_predictions: int | None = None,
                 whole_word_mask: bool = False) -> int:
    """M, the prediction slots per sequence every batch carries: max_predictions when set, else
    ceil(rate * L) rounded up to a multiple of 8 (at least 8), with 1.5x headroom for whole words.

    The one count of M: the loader, the synthetic source, the loop's FLOPs and the ahead-of-time
    compile all take it from here, so what is compiled is what is fed.
    """
    if max_predictions:
        return max_predictions
    need = math.ceil(mask_rate * seq_len * (1.5 if whole_word_mask else 1.0))
    return max(8, -(-need // 8) * 8)


def mask_tokens(ids: np.ndarray, keys: np.ndarray, *, mask_rate: float, mask_id: int,
                never_mask: np.ndarray, random_ids: np.ndarray, max_predictions: int,
                continuation: np.ndarray | None = None, replace_rate: float = 0.8,
                random_rate: float = 0.1) -> dict[str, np.ndarray]:
    """Mask a batch.

    Args:
      ids: int [B, L] token ids.
      keys: uint64 [B] row keys (see `row_keys`).
      mask_rate: fraction of maskable tokens to predict, in [0, 1].
      never_mask: bool [V], True for ids never chosen ([CLS], [SEP], [PAD]).
      random_ids: int [R] ids a "random token" replacement draws from, uniformly.
      max_predictions: M, the number of prediction slots per row.
      continuation: bool [V], True for `##` pieces; given, whole words are masked.
      replace_rate, random_rate: of the chosen tokens, the share set to [MASK] and to a random
        id; the rest keep their id.
    Returns:
      input_ids int32 [B, L], masked_positions int32 [B, M] (ascending, 0 in empty slots),
      masked_labels int32 [B, M] (original ids, 0 in empty slots), masked_weights float32 [B, M].
    """
    if not 0.0 <= mask_rate <= 1.0:
        raise ValueError(f"mask_rate must be in [0, 1], got {mask_rate}")
    if replace_rate < 0 or random_rate < 0 or replace_rate + random_rate > 1:
        raise ValueError(f"replace_rate {replace_rate} + random_rate {random_rate} must lie in [0, 1]")
    ids = np.asarray(ids, np.int32)
    B, L = ids.shape
    M = max_predictions
    pos = np.arange(L, dtype=_U64)
    with np.errstate(over="ignore"):
        h = _mix(keys.astype(_U64)[:, None] + (pos + _U64(1)) * _GOLDEN)  # [B, L]
        row_u = (_mix(keys.astype(_U64) ^ _M2) >> _U64(11)) * 2.0 ** -53  # [B] uniform [0, 1)

    maskable = ~never_mask[ids]  # [B, L]
    if continuation is None:
        starts = maskable
    else:  # a word starts at a maskable non-continuation, or right after something unmaskable
        prev_ok = np.zeros_like(maskable)
        prev_ok[:, 1:] = maskable[:, :-1]
        starts = maskable & ~(continuation[ids] & prev_ok)
    n_units = starts.sum(1)
    k = np.floor(mask_rate * n_units + row_u).astype(np.int64)
    k = np.minimum(k, n_units)
    if continuation is None:
        k = np.minimum(k, M)

    # Unique sort keys: 32 random bits above the position, so exactly k units win per row.
    sort_key = np.where(starts, ((h >> _U64(32)) << _U64(16)) | pos, _NEVER)
    ranked = np.sort(sort_key, axis=1)
    kth = np.take_along_axis(ranked, np.maximum(k - 1, 0)[:, None], axis=1)
    chosen_start = starts & (sort_key <= kth) & (k > 0)[:, None]
    if continuation is None:
        chosen = chosen_start
    else:  # spread each chosen start over its word; cap rows that overflow M
        start_pos = np.maximum.accumulate(np.where(starts, np.arange(L), 0), axis=1)
        chosen = maskable & np.take_along_axis(chosen_start, start_pos, axis=1)
        for b in np.flatnonzero(chosen.sum(1) > M):  # rare: a loop per row, never per token
            chosen[b] = _cap_row(chosen[b], starts[b], maskable[b], sort_key[b], M)

    rows, cols = np.nonzero(chosen)  # row-major: positions ascend within each row
    count = chosen.sum(1)
    slot = np.arange(rows.size) - np.repeat(np.cumsum(count) - count, count)
    positions = np.zeros((B, M), np.int32)
    labels = np.zeros((B, M), np.int32)
    positions[rows, slot] = cols
    labels[rows, slot] = ids[rows, cols]
    weights = (np.arange(M)[None, :] < count[:, None]).astype(np.float32)

    # 80/10/10 from the low 32 bits of each chosen token's hash; its random id from a rehash.
    hc = h[rows, cols]
    u = hc & _LOW32
    to_mask = u < _U64(int(replace_rate * 2**32))
    to_random = ~to_mask & (u < _U64(min(int((replace_rate + random_rate) * 2**32), 2**32)))
    out = ids.copy()
    out[rows[to_mask], cols[to_mask]] = mask_id
    if to_random.any():
        with np.errstate(over="ignore"):
            r = _mix(hc[to_random] ^ _M1) >> _U64(32)
        pick = (r * _U64(len(random_ids))) >> _U64(32)
        out[rows[to_random], cols[to_random]] = random_ids[pick.astype(np.int64)]
    return {"input_ids": out, "masked_positions": positions, "masked_labels": labels,
            "masked_weights": weights}


def _cap_row(chosen, starts, maskable, sort_key, M):
    """Keep the highest-priority chosen words whose tokens fit in M slots."""
    L = chosen.size
    start_idx = np.flatnonzero(starts & chosen)
    ends = np.append(np.flatnonzero(starts)[1:], L)
    lengths = []
    for s in start_idx:  # word length: up to the next start or unmaskable token
        stop = ends[np.searchsorted(ends, s, side="right")] if s < L - 1 else L
        run = maskable[s:stop]
        lengths.append(int(run.argmin()) if not run.all() else len(run))
    order = np.argsort(sort_key[start_idx])
    keep = np.zeros(L, bool)
    used = 0
    for i in order:
        if used + lengths[i] > M:
            break
        keep[start_idx[i]:start_idx[i] + lengths[i]] = True
        used += lengths[i]
    return keep
