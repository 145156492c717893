"""Embedding lookups whose gradient is a matmul: tables of few rows that every row of the batch reads
(positions, token types)."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def take_rows(table, ids, num_rows: int):
    """table[ids] (rows of a [V, H] table), whose gradient is one_hot(ids)^T @ g: a matmul.

    The usual gradient of a lookup is a scatter-add of every position's cotangent into its row. For a
    table of few rows that the whole batch reads (token types: 2 rows for B x L lookups; positions: B
    lookups of each row) that scatter serialises on atomics: on an H100 it took half of bert-base's
    train step (docs/benchmarks.md). The one-hot matmul sums the same cotangents, in float32 (or
    wider) whatever the compute dtype, at full precision. Out-of-range ids get no gradient (as the
    scatter drops them)."""
    return jnp.take(table, ids, axis=0)


def _take_rows_fwd(table, ids, num_rows):
    return jnp.take(table, ids, axis=0), (ids, jnp.zeros((), table.dtype))


def _take_rows_bwd(num_rows, res, g):
    ids, like = res
    acc = jnp.promote_types(g.dtype, jnp.float32)
    onehot = jax.nn.one_hot(ids.reshape(-1), num_rows, dtype=g.dtype)
    grad = jnp.matmul(onehot.T, g.reshape(-1, g.shape[-1]), precision=jax.lax.Precision.HIGHEST,
                      preferred_element_type=acc)
    zero_ids = np.zeros(ids.shape, jax.dtypes.float0)
    return grad.astype(like.dtype), zero_ids


take_rows.defvjp(_take_rows_fwd, _take_rows_bwd)


# Above this many rows the one-hot operand [tokens, rows] grows large (an 8192-position table at
# 32 x 1024 tokens: 512 MB of bf16), so such tables keep nn.Embed's scatter. A chosen bound, not measured.
ONE_HOT_MAX_ROWS = 2048


class SmallTableEmbed(nn.Embed):
    """nn.Embed (same param, same forward) whose table gradient is a one-hot matmul (take_rows), for
    tables of at most ONE_HOT_MAX_ROWS rows."""

    def __call__(self, inputs):
        if self.num_embeddings > ONE_HOT_MAX_ROWS:
            return super().__call__(inputs)
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError("SmallTableEmbed: ids must be integers")
        (embedding,) = self.promote_dtype(self.embedding, dtype=self.dtype, inexact=False)
        return take_rows(embedding, inputs, self.num_embeddings)


def padding_row_frozen(words: Array, input_ids: Array, pad_id) -> Array:
    """words [B, T, H] looked up from input_ids [B, T], with no gradient reaching the table where the id is pad_id
    (None: everywhere), as torch's nn.Embedding(padding_idx=pad) keeps its pad row (a tied decoder still
    trains it)."""
    if pad_id is None:
        return words
    return jnp.where((input_ids == pad_id)[..., None], jax.lax.stop_gradient(words), words)
