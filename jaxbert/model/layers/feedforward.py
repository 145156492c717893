"""Feed-forward blocks: the gated one (GeGLU, SwiGLU: act(a) * b between two projections), and the
running of any feed-forward over blocks of tokens (ModelOptions.ffn_chunks) with one dropout mask for
the whole array."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model.activations import ACT_FNS
from jaxbert.model.layers.dense import Dense
from jaxbert.model.dropout import apply_hash_dropout, make_dropout

Array = jax.Array


def linear(features: int, axes: tuple, name: str, use_bias: bool, init: Callable, options, cls=Dense, **view):
    """A Dense under a checkpoint's name: kernel [in, out] from `init`, zero bias, both with logical axes."""
    return cls(features, use_bias=use_bias, dtype=options.dtype, param_dtype=options.param_dtype,
               kernel_init=nn.with_logical_partitioning(init, axes),
               bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]), name=name, **view)


class GatedFeedForward(nn.Module):
    """x [.., H] -> down(dropout(act(a) * b)) [.., H], with a, b [.., I] the two input projections.

    Attributes:
      names: ("Wi", "Wo"): one fused input kernel [H, 2I] whose halves are a | b (ModernBERT's GeGLU);
        ("gate_proj", "up_proj", "down_proj"): a from gate_proj, b from up_proj (Llama-style SwiGLU).
      activation: transformers' hidden_act name of act.
      init_in, init_out: the initialisers of the input and output kernels.
    """

    hidden_size: int
    intermediate_size: int
    activation: str
    names: tuple
    use_bias: bool
    dropout_rate: float
    options: Any
    init_in: Callable
    init_out: Callable

    @nn.compact
    def __call__(self, x, deterministic=True, dropout_key=None, whole=None, start=None):
        """dropout_key: HashDropout's key for the whole [B, T, I] of which x's rows are the block at `start`
        (default: all of it; see in_token_blocks); None: a dropout layer of this module's own."""
        I, opts = self.intermediate_size, self.options
        if len(self.names) == 2:
            h = linear(2 * I, ("embed", "mlp"), self.names[0], self.use_bias, self.init_in, opts)(x)
            a, b = h[..., :I], h[..., I:]
        else:
            a, b = (linear(I, ("embed", "mlp"), n, self.use_bias, self.init_in, opts)(x) for n in self.names[:2])
        h = ACT_FNS[self.activation](a) * b
        if dropout_key is None:
            h = make_dropout(opts.dropout_impl, self.dropout_rate)(h, deterministic=deterministic)
        elif not deterministic and self.dropout_rate > 0:
            h = apply_hash_dropout(h, dropout_key, self.dropout_rate, whole=whole, start=start)
        return linear(self.hidden_size, ("mlp", "embed"), self.names[-1], self.use_bias, self.init_out, opts)(h)


def takes_blocks(options, length: int) -> bool:
    """Whether a feed-forward over `length` tokens runs in options.ffn_chunks blocks of tokens."""
    return options.ffn_chunks > 1 and length % options.ffn_chunks == 0


def dropout_key(module, rate: float, deterministic: bool, blocks: bool, what: str):
    """The one HashDropout key of a feed-forward call (None where it drops nothing or dropout_impl is not
    "hash"): its mask is drawn for the whole [B, T, ..] whether the block runs whole or in blocks of tokens
    (each applying its slice), so the output is the same either way. Blocks need the hash dropout."""
    if deterministic or rate <= 0:
        return None
    if blocks:
        module.require_hash_dropout("ffn_chunks", what)
    return module.make_rng("dropout") if module.options.dropout_impl == "hash" else None


def in_token_blocks(module, block: Callable, x: Array, key) -> Array:
    """block(module, x_block, key, t0) over options.ffn_chunks blocks of x's tokens [B, T / chunks, ..], each
    recomputed in the backward pass (nn.remat), so that one block's intermediate activations are held at a
    time; t0 is the block's first token (static)."""
    chunks = module.options.ffn_chunks
    C = x.shape[1] // chunks
    remat_block = nn.remat(block, static_argnums=(3,))
    return jnp.concatenate([remat_block(module, x[:, i * C:(i + 1) * C], key, i * C) for i in range(chunks)],
                           axis=1)
