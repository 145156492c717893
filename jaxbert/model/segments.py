"""Packed sequences: the attention mask and the positions of rows holding several documents.

A packed row carries ``segment_ids [B, L]``: 0 for padding, 1..k for the documents of the row, each
document one contiguous run of tokens. These functions turn segment ids into what a model needs,
for any family (BERT's absolute table, RoBERTa's table counted from the padding id, rotary
positions, local windows); they know nothing of a model's config.

  segment_mask(segment_ids)              bool [B, T, T]: query and key in the same segment
  segment_mask(segment_ids, window=w)    ... and at most w tokens apart (a local window)
  segment_positions(segment_ids, offset) int32 [B, L]: offset + index within the document
  segment_starts(segment_ids)            bool [B, L]: the first token of each run

A padding query (segment 0) sees only padding keys; combined with a padding mask it sees none
(its output is then meaningless, as padding outputs already are).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

Array = jax.Array


def segment_starts(segment_ids: Array) -> Array:
    """bool [B, L]: True where a run of equal segment ids begins (position 0 always)."""
    s = jnp.asarray(segment_ids)
    first = jnp.ones(s.shape[:-1] + (1,), bool)
    return jnp.concatenate([first, s[..., 1:] != s[..., :-1]], axis=-1)


def segment_positions(segment_ids: Array, offset: int = 0, pad_position: Optional[int] = None) -> Array:
    """int32 [B, L]: offset + the index of each token within its run of equal segment ids.

    offset: the position of a document's first token (0 for BERT's table, pad_token_id + 1 for
      RoBERTa's, 0 for rotary positions).
    pad_position: the position given to padding (segment 0); None counts padding like a
      document (its value is then never read by a real token).
    """
    s = jnp.asarray(segment_ids)
    L = s.shape[-1]
    index = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), s.shape)
    start = jax.lax.cummax(jnp.where(segment_starts(s), index, 0), axis=s.ndim - 1)
    positions = index - start + jnp.int32(offset)
    if pad_position is not None:
        positions = jnp.where(s == 0, jnp.int32(pad_position), positions)
    return positions.astype(jnp.int32)


def segment_mask(segment_ids: Array, window: Optional[int] = None) -> Array:
    """bool [B, T, T]: True where query t and key s lie in the same segment (and, given `window`,
    |t - s| <= window). Combine with a padding mask ([B, 1, T] after a head axis) by `&`."""
    s = jnp.asarray(segment_ids)
    mask = s[..., :, None] == s[..., None, :]
    if window is not None:
        L = s.shape[-1]
        i = jnp.arange(L)
        mask = mask & (jnp.abs(i[:, None] - i[None, :]) <= window)
    return mask


def segment_lengths(segment_ids: Array, num_segments: int) -> Array:
    """int32 [B, num_segments + 1]: tokens per segment id 0..num_segments (index 0: padding)."""
    s = jnp.asarray(segment_ids)
    one_hot = s[..., None] == jnp.arange(num_segments + 1)
    return one_hot.sum(-2).astype(jnp.int32)
