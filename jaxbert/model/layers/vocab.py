"""The masked-LM decoder onto the vocabulary: tied to the word-embedding table or a kernel of its own, with
an optional bias; where ModelOptions.vocab_loss_chunk chooses the chunked loss for the vocabulary, its
weight and bias handed over unapplied (jaxbert.model.vocab_loss.VocabProjection), the same params."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax

from jaxbert.model.base import DenseWeights, tied_logits
from jaxbert.model.layers.feedforward import linear
from jaxbert.model.vocab_loss import VocabProjection, uses_chunks


class VocabBias(nn.Module):
    """What a tied decoder holds of its own: bias [V] (its weight is the word-embedding table)."""

    vocab_size: int
    options: Any

    @nn.compact
    def __call__(self) -> jax.Array:
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (self.vocab_size,), self.options.param_dtype)
        return bias.astype(self.options.dtype)


def vocab_decoder(x: jax.Array, table, *, name: str, vocab_size: int, use_bias: bool, init: Callable, options):
    """x [B, M, H] -> logits [B, M, V] (or a VocabProjection where the chunked loss takes this vocabulary).

    table: the word embeddings [V, H] in the compute dtype for a tied decoder (its bias, if any, under `name`),
    or None for a kernel [H, V] of its own under `name`, drawn from `init`. Call it from a compact method: it
    creates params there."""
    chunk = uses_chunks(vocab_size, options.vocab_loss_chunk)
    if table is not None:
        bias = VocabBias(vocab_size, options, name=name)() if use_bias else None
        return VocabProjection(x, table, bias, chunk=chunk) if chunk else tied_logits(x, table, bias)
    if chunk:  # the kernel [H, V] and bias, not applied (the same params as the Dense below)
        kernel, bias = linear(vocab_size, ("embed", "vocab"), name, use_bias, init, options, cls=DenseWeights)(x)
        return VocabProjection(x, kernel, bias, chunk=chunk, columns=True)
    return linear(vocab_size, ("embed", "vocab"), name, use_bias, init, options)(x)
