"""The softmax of attention scores under a bool mask, taken in float32 at least (every attention path's)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def masked_softmax(scores: Array, mask: Array) -> Array:
    """softmax over the last axis of `scores` where `mask` is True, in scores' dtype.

    Taken in float32 at least (bf16 compute loses it there). Masked entries get the
    dtype's own minimum, so a row with every key masked comes out uniform, as in
    transformers. For a narrower dtype (bf16 compute) the masked scores stay in
    that dtype (they come out of a bf16 matmul: widening first adds no precision)
    and only the reductions run in float32; see _softmax_narrow.
    """
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    if jnp.dtype(scores.dtype).itemsize >= 4:
        return jax.nn.softmax(scores, axis=-1)
    return _softmax_narrow(scores)


@jax.custom_vjp
def _softmax_narrow(x):
    """softmax of a bf16/f16 x [..., S], computed in float32 and rounded once to x's dtype.

    Written as exp(x - max - log(sum)) rather than exp(x - max) / sum so that no
    float32 [..., S] tensor is needed twice: XLA keeps the narrow x and recomputes
    the exponent in each pass instead of holding float32 exponentials (on a TPU
    v4 bert-large step at T = 512 those were 16 MiB per sequence per layer).
    The backward pass likewise keeps the narrow probabilities, not float32 ones,
    and returns the gradient in x's dtype, formed in float32. Being a custom VJP,
    it is reverse-mode only (jax.jvp / jacfwd through it raise).
    """
    z = x.astype(jnp.float32)
    z = z - jnp.max(z, axis=-1, keepdims=True)
    log_sum = jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))
    return jnp.exp(z - log_sum).astype(x.dtype)


def _softmax_narrow_fwd(x):
    probs = _softmax_narrow(x)
    return probs, probs


def _softmax_narrow_bwd(probs, g):
    y, g = probs.astype(jnp.float32), g.astype(jnp.float32)
    # d softmax: y * (g - <g, y>) along the softmax axis.
    return ((y * (g - jnp.sum(g * y, axis=-1, keepdims=True))).astype(probs.dtype),)


_softmax_narrow.defvjp(_softmax_narrow_fwd, _softmax_narrow_bwd)
