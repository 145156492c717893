"""Rotary position embeddings (RoPE, rotate-half form): inverse frequencies, cos / sin tables at given
positions, and the rotation of queries or keys. Every family with rotary positions reads them from here;
a theta per layer kind is the caller's choice (ModernBERT's global and local, EuroBERT's one)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.model.segments import segment_positions

Array = jax.Array


def inverse_frequencies(head_dim: int, theta: float, dtype) -> np.ndarray:
    """RoPE's inverse frequencies theta ** (-2i / D), i < D / 2, computed on the host.

    In float64 they are taken in float64 throughout. Otherwise they follow transformers' float32
    recipe: the exponent rounded to float32, the power rounded to float32, then its reciprocal in
    float32. They are computed with NumPy, not jnp, because XLA folds the jnp expression into a
    constant under jit and rounds it differently from an eager call (a float32 ulp apart in 3 of 8
    entries at D = 16, theta 10,000), which puts a float64 model's tables 6e-8 off.
    """
    if np.dtype(dtype) == np.float64:
        return 1.0 / (float(theta) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    exponent = np.arange(0, head_dim, 2).astype(np.float32) / np.float32(head_dim)
    power = (np.float64(theta) ** exponent.astype(np.float64)).astype(np.float32)
    return np.float32(1.0) / power


def rope_tables(positions: Array, head_dim: int, theta: float, dtype) -> tuple[Array, Array]:
    """cos, sin [B or 1, T, D] of rotate-half RoPE at positions [B or 1, T].

    The angles and their cos / sin are taken in float32, or float64 when that is the compute dtype
    (transformers takes them in float32 whatever the dtype: its float64 model is then only
    float32-exact, and parity gives it float64 tables too), and cast to the compute dtype.
    """
    wide = jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32
    inv_freq = jnp.asarray(inverse_frequencies(head_dim, theta, wide), wide)
    angles = positions.astype(wide)[..., None] * inv_freq  # [B, T, D / 2]
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def apply_rope(x: Array, cos: Array, sin: Array, layout: str = "BTND") -> Array:
    """x rotated by cos, sin [B, T, D]: x * cos + rotate_half(x) * sin. x is [B, T, N, D] (layout "BTND"),
    or heads first with the sequence minor, [B, N, D, T] ("BNDT": the splash kernel's layout, where the
    halves of the head dim are rows, not lanes)."""
    D = x.shape[-1] if layout == "BTND" else x.shape[-2]
    half, axis = D // 2, (-1 if layout == "BTND" else -2)
    lo, hi = jax.lax.slice_in_dim(x, 0, half, axis=axis), jax.lax.slice_in_dim(x, half, D, axis=axis)
    rotated = jnp.concatenate([-hi, lo], axis=axis)
    if layout == "BTND":
        cos, sin = cos[:, :, None], sin[:, :, None]
    else:
        cos, sin = (jnp.swapaxes(t, 1, 2)[:, None] for t in (cos, sin))
    return x * cos + rotated * sin


def rotary_positions(position_ids, segment_ids, length: int) -> Array:
    """The positions RoPE rotates by, [B or 1, T]: position_ids where given, else counting from 0 in each document
    of packed rows (segment_ids [B, T]), else 0 .. T-1."""
    if position_ids is not None:
        return position_ids
    if segment_ids is not None:
        return segment_positions(segment_ids, 0)
    return jnp.arange(length)[None]
