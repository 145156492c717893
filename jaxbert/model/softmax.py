"""The softmax of attention scores under a bool mask, taken in float32 at least (every attention path's), and
the blocked paths' softmax times the values with a written-out backward (softmax_context)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

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


def softmax_context(scores: Array, mask: Array, v: Array) -> Array:
    """masked_softmax(scores, mask) times v: scores [..., q, k], mask broadcastable to them, v [..., k, D] ->
    context [..., q, D].

    For float32 and wider scores its backward pass is written out: the softmax's row sums are taken as
    <dcontext, context> over the head dim, where autodiff takes <dprobs, probs> over the keys (the same
    number: sum_k p_k (dcontext . v_k) = dcontext . context). At T = 512 that is a reduction over 64 numbers a
    row instead of 512 (in a 6-layer, hidden-384 ModernBERT's CPU step at 8 x 512 the traced attention went
    from about 460 to 410-430 ms; docs/benchmarks.md). Narrower scores (bf16 compute) keep masked_softmax's
    own backward.
    """
    if jnp.dtype(scores.dtype).itemsize < 4:
        return jnp.einsum("...qk,...kD->...qD", masked_softmax(scores, mask), v)
    return _softmax_context(scores, mask, v)


@jax.custom_vjp
def _softmax_context(scores, mask, v):
    return jnp.einsum("...qk,...kD->...qD", masked_softmax(scores, mask), v)


def _softmax_context_fwd(scores, mask, v):
    probs = masked_softmax(scores, mask)
    context = jnp.einsum("...qk,...kD->...qD", probs, v)
    return context, (probs, mask, v, context)


def _softmax_context_bwd(res, g):
    probs, mask, v, context = res
    dv = jnp.einsum("...qk,...qD->...kD", probs, g)
    dprobs = jnp.einsum("...qD,...kD->...qk", g, v)
    rows = jnp.sum(g * context, axis=-1, keepdims=True)
    dscores = jnp.where(mask, probs * (dprobs - rows), jnp.zeros((), probs.dtype))
    return dscores, np.zeros(mask.shape, jax.dtypes.float0), dv.astype(v.dtype)


_softmax_context.defvjp(_softmax_context_fwd, _softmax_context_bwd)
