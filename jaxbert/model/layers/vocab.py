"""The masked-LM decoder onto the vocabulary: tied to the word-embedding table or a kernel of its own, with
an optional bias; where ModelOptions.vocab_loss_chunk chooses the chunked loss for the vocabulary, its
weight and bias handed over unapplied (jaxbert.model.vocab_loss.VocabProjection), the same params."""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model.layers.dense import DenseWeights
from jaxbert.model.layers.feedforward import linear
from jaxbert.model.options import cpu_target
from jaxbert.model.vocab_loss import VocabProjection, uses_chunks


def tied_logits(x: jax.Array, table: jax.Array, bias: Optional[jax.Array]) -> jax.Array:
    """x [..., H] -> logits [..., V]: x times the tied decoder's table [V, H] transposed, plus bias [V] (or None),
    cast to the logits' dtype after the matmul.

    Where the step is compiled for a CPU its backward is written out (_tied_logits): autodiff's, as XLA's CPU
    backend runs it, took the bias gradient, a sum over the B x M rows of the [B, M, V] logits' cotangent, at
    about 6 ns an element (285 ms of a 6-layer, hidden-384 ModernBERT's 3.1 s step at 8 x 512, 30% masked,
    V = 50,368), and the table's gradient as a [V, B x M] x [B x M, H] matmul after transposing the cotangent
    (465 ms). Written out, the bias gradient is the same sum as a matmul by ones (8 ms) and the table's is
    formed [H, V] and transposed (270 ms). Elsewhere autodiff's is kept."""
    if cpu_target():
        return _tied_logits(x, table, None if bias is None else bias.astype(table.dtype))
    logits = jnp.einsum("...H,VH->...V", x, table)
    return logits if bias is None else logits + bias.astype(logits.dtype)


@jax.custom_vjp
def _tied_logits(x, table, bias):
    # one 2-D matmul over the rows [B x M, H], as Dense multiplies (the same values as the einsum)
    logits = jnp.dot(x.reshape(-1, x.shape[-1]), table.T)
    logits = logits if bias is None else logits + bias
    return logits.reshape(*x.shape[:-1], table.shape[0])


def _tied_logits_fwd(x, table, bias):
    return _tied_logits(x, table, bias), (x, table, bias)


def _tied_logits_bwd(res, g):
    x, table, bias = res
    rows = g.reshape(-1, g.shape[-1])  # [B x M, V]
    dx = jnp.dot(rows, table).reshape(x.shape)
    dtable = jnp.dot(x.reshape(-1, x.shape[-1]).T, rows).T  # formed [H, V]: the cotangent read as it lies
    dbias = None
    if bias is not None:
        ones = jnp.ones((rows.shape[0],), rows.dtype)
        dbias = jnp.dot(ones, rows, precision=jax.lax.Precision.HIGHEST,
                        preferred_element_type=jnp.promote_types(rows.dtype, jnp.float32)).astype(bias.dtype)
    return dx, dtable, dbias


_tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)


class VocabBias(nn.Module):
    """What a tied decoder holds of its own: bias [V] (its weight is the word-embedding table)."""

    vocab_size: int
    options: Any

    @nn.compact
    def __call__(self) -> jax.Array:
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (self.vocab_size,), self.options.param_dtype)
        return bias.astype(self.options.dtype)


def vocab_decoder(x: jax.Array, table, *, name: str, vocab_size: int, use_bias: bool, init: Callable, options,
                  bias: Optional[jax.Array] = None):
    """x [B, M, H] -> logits [B, M, V] (or a VocabProjection where the chunked loss takes this vocabulary).

    table: the word embeddings [V, H] in the compute dtype for a tied decoder, or None for a kernel [H, V] of its
    own under `name`, drawn from `init`. use_bias: the decoder holds a bias [V] under `name`; else `bias`, one
    its caller holds (BERT's head keeps it beside the decoder), or None, in any dtype: it is cast to the compute
    dtype where it is added, after the matmul (XLA's TPU compile of bert-base's step staged buffers differently,
    for 5% more bytes, with the cast first: docs/tpu.md). Call it from a compact method: it creates params there."""
    chunk = uses_chunks(vocab_size, options.vocab_loss_chunk)
    compute = lambda b: None if b is None else b.astype(options.dtype)
    if table is not None:
        if use_bias:
            bias = VocabBias(vocab_size, options, name=name)()
        return VocabProjection(x, table, compute(bias), chunk=chunk) if chunk else tied_logits(x, table, bias)
    if chunk:  # the kernel [H, V] and bias, not applied (the same params as the Dense below)
        kernel, own = linear(vocab_size, ("embed", "vocab"), name, use_bias, init, options, cls=DenseWeights)(x)
        return VocabProjection(x, kernel, own if use_bias else compute(bias), chunk=chunk, columns=True)
    logits = linear(vocab_size, ("embed", "vocab"), name, use_bias, init, options)(x)
    return logits if use_bias or bias is None else logits + bias.astype(logits.dtype)


def gather_positions(hidden_states, positions):
    """[B, L, H] at positions [B, M] -> [B, M, H]: the masked positions an MLM head reads."""
    return jnp.take_along_axis(hidden_states, positions[..., None].astype(jnp.int32), axis=1)
