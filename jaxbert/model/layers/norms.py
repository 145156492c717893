"""LayerNorm and RMSNorm as PyTorch computes them, with logical axes on their params."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


def layer_norm(epsilon: float, options, name: str, use_bias: bool = True) -> nn.LayerNorm:
    """nn.LayerNorm with a two-pass variance (use_fast_variance=False), as PyTorch computes it; scale and
    bias sharded along "embed"."""
    return nn.LayerNorm(
        epsilon=epsilon, use_bias=use_bias, dtype=options.dtype, param_dtype=options.param_dtype,
        use_fast_variance=False,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * scale over the last axis, scale [H] (transformers' `weight`).

    The mean square is taken in float32, or in float64 when x is float64 (transformers' Llama-style norms
    take it in float32 whatever the dtype; parity gives its float64 model the float64 norm), and the
    normalised x is cast back to x's dtype before the scale, as those norms do."""

    epsilon: float = 1e-6
    dtype: Any = None
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                           (x.shape[-1],), self.param_dtype)
        dtype = self.dtype or x.dtype
        x = x.astype(dtype)
        wide = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
        h = x.astype(wide)
        h = h * jax.lax.rsqrt(jnp.mean(jnp.square(h), axis=-1, keepdims=True) + self.epsilon)
        return scale.astype(dtype) * h.astype(dtype)


def rms_norm(epsilon: float, options, name: str) -> RMSNorm:
    return RMSNorm(epsilon=epsilon, dtype=options.dtype, param_dtype=options.param_dtype, name=name)
