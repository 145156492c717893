"""ModernBERT self-attention: fused Wqkv, rotary position embeddings, full or sliding-window
attention, in the implementations ModelOptions names (einsum, dot_product, and jaxbert.model.fused's
blocked, splash and auto, which never form the [B, N, T, T] scores)."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.model.layers import attention
from jaxbert.model import fused
from jaxbert.model.layers.dense import Dense
from jaxbert.model.layers.rotary import apply_rope
from jaxbert.model.modernbert.base import ModernBertModule
from jaxbert.model.options import cpu_target, target_kind

Array = jax.Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def rotary_qkv(x: Array, kernel: Array, bias, cos: Array, sin: Array, scale: float):
    """q * scale, k rotated by RoPE and v, each [B, N, T, D], from x [B, T, H] and the fused Wqkv kernel
    [H, 3H] (transformers' q | k | v blocks, each head-major) and bias [3H] or None; cos, sin [B or 1, T, D].

    The forward computes them heads first and sequence-minor ([3, B, N, D, T] from the matmul itself, RoPE on
    that layout) and hands them over transposed: the splash kernel lays them out sequence-minor again, and
    XLA drops the pair. The backward is written out. The kernel returns dq, dk, dv head-minor; autodiff's
    way back rotated them in several passes, stacked the three and copied the stack into the layout of each
    of Wqkv's two gradient matmuls (on a v5e, about 1.5 ms of a modernbert-base layer at 36 x 1024). Here
    RoPE's transpose is one matmul pass (rotate_half^T as a [D, D] signed permutation: a matmul writes its
    result in whatever layout its reader wants), and Wqkv's gradients are three matmuls per q, k, v block,
    each reading its block as it is.
    """
    return _rotary_qkv(x, kernel, bias, cos, sin, scale)


def _rotary_qkv(x, kernel, bias, cos, sin, scale):
    B, T, H = x.shape
    D = cos.shape[-1]
    N = kernel.shape[1] // (3 * D)
    qkv = jnp.einsum("BTH,HcND->cBNDT", x, kernel.reshape(H, 3, N, D))
    if bias is not None:
        qkv = qkv + bias.reshape(3, 1, N, D, 1)
    q, k = (apply_rope(t, cos, sin, layout="BNDT") for t in (qkv[0], qkv[1]))
    q = q * jnp.asarray(scale, q.dtype)  # rounded as the other paths scale
    return tuple(jnp.swapaxes(t, -1, -2) for t in (q, k, qkv[2]))


def _rotary_qkv_rows(x, kernel, bias, cos, sin, scale):
    """rotary_qkv's values as a CPU computes them faster: Wqkv one [B x T, H] x [H, 3H] matmul, RoPE on
    [B, T, N, D], then q, k, v transposed heads first; autodiff's backward. On XLA's CPU backend the
    sequence-minor layout costs more than it saves (a 6-layer, hidden-384 ModernBERT's train step at 8 x 512:
    2.71 s against 2.89 s, docs/benchmarks.md)."""
    B, T, H = x.shape
    D = cos.shape[-1]
    N = kernel.shape[1] // (3 * D)
    qkv = jnp.dot(x.reshape(B * T, H), kernel)
    if bias is not None:
        qkv = qkv + bias
    q, k, v = (t.reshape(B, T, N, D) for t in jnp.split(qkv, 3, axis=-1))
    q, k = (apply_rope(t, cos, sin) for t in (q, k))
    q = q * jnp.asarray(scale, q.dtype)
    return tuple(jnp.swapaxes(t, 1, 2) for t in (q, k, v))


def _rotary_qkv_fwd(x, kernel, bias, cos, sin, scale):
    return _rotary_qkv(x, kernel, bias, cos, sin, scale), (x, kernel, bias, cos, sin)


def _rotary_qkv_bwd(scale, residuals, grads):
    x, kernel, bias, cos, sin = residuals
    H = x.shape[-1]
    D = cos.shape[-1]
    N = kernel.shape[1] // (3 * D)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    # RoPE's transpose g * cos + rotate_half^T(g * sin), rotate_half^T(z) = [z_hi, -z_lo] = z @ turn; sin may
    # move past it because rope_tables repeats each angle in both halves of the head dim
    eye, zero = np.eye(D // 2), np.zeros((D // 2, D // 2))
    turn = jnp.asarray(np.block([[zero, -eye], [eye, zero]]), x.dtype)
    c, s = jnp.swapaxes(cos, 1, 2)[:, None], jnp.swapaxes(sin, 1, 2)[:, None]  # [B or 1, 1, D, T]

    def unrotate(g):  # [B, N, T, D] -> [B, N, D, T]
        turned = jnp.einsum("BNTd,de->BNeT", g, turn, precision=jax.lax.Precision.HIGHEST)
        return jnp.swapaxes(g, -1, -2) * c + turned * s

    gq, gk, gv = grads  # [B, N, T, D]
    blocks = [unrotate(gq * jnp.asarray(scale, gq.dtype)), unrotate(gk), jnp.swapaxes(gv, -1, -2)]
    view = kernel.reshape(H, 3, N, D)
    dx = sum(jnp.einsum("BNDT,HND->BTH", g, view[:, i], preferred_element_type=acc) for i, g in enumerate(blocks))
    dkernel = jnp.stack([jnp.einsum("BTH,BNDT->HND", x, g) for g in blocks], axis=1).reshape(H, 3 * H)
    dbias = None
    if bias is not None:
        dbias = jnp.stack([jnp.sum(g, axis=(0, 3), dtype=acc) for g in blocks]).reshape(3 * H).astype(bias.dtype)
    # cos and sin are tables of positions (integers): nothing differentiable lies behind them
    return dx.astype(x.dtype), dkernel, dbias, jnp.zeros_like(cos), jnp.zeros_like(sin)


rotary_qkv.defvjp(_rotary_qkv_fwd, _rotary_qkv_bwd)


def written_backward(kind: str) -> bool:
    """Whether rotary_qkv's written-out backward serves a step compiled for devices of this `device_kind`. Not on
    a TPU v4, where libtpu lays it out worse than autodiff's (per 16 micro-batches of modernbert-base phase 1 at
    36 x 1024, v4:2x2x1: a bound of 11,957 against 11,808 ms; modernbert-large's phase 2 at 7 x 8192 no longer
    fit a 16 GiB v4 device; docs/tpu.md): there the same forward is differentiated by autodiff."""
    return not kind.startswith("TPU v4")


class RotaryQKV(Dense):
    """Wqkv as Dense's params ([H, 3H] kernel, [3H] bias, the same init), applied by rotary_qkv: q (scaled by
    `scale`), k rotated by `rope`, v, each [B, N, T, D]. By the kind of device the step is compiled for: on a
    CPU as rows (_rotary_qkv_rows); elsewhere with rotary_qkv's written-out backward, or autodiff's where
    written_backward says."""

    scale: float = 1.0

    @nn.compact
    def __call__(self, inputs: Array, rope) -> tuple[Array, Array, Array]:
        H = jnp.shape(inputs)[-1]
        kernel = self.param("kernel", self.kernel_init, (H, self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        inputs, kernel, bias = nn.dtypes.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        if cpu_target():
            return _rotary_qkv_rows(inputs, kernel, bias, *rope, float(self.scale))
        fn = rotary_qkv if written_backward(target_kind()) else _rotary_qkv
        return fn(inputs, kernel, bias, *rope, float(self.scale))


def band(length: int, half_window: int) -> Array:
    """bool [1, 1, T, T]: True where |query - key| <= half_window (a sliding layer's reach)."""
    pos = jnp.arange(length)
    return (jnp.abs(pos[:, None] - pos[None, :]) <= half_window)[None, None]


def takes_fused(config, options, deterministic: bool, output_attentions: bool) -> bool:
    """Whether ModernBertAttention runs one of jaxbert.model.fused's paths (jaxbert.model.layers.attention)."""
    return attention.takes_fused(options, config.attention_dropout, deterministic, output_attentions)


class ModernBertAttention(ModernBertModule):
    """Wqkv -> rotary q, k -> attention (whole, or within the window) -> Wo -> dropout.

    Args:
      hidden_states: [B, T, H] (already attn_norm-ed).
      mask: bool [B, 1, 1, T] padding mask, or [B, 1, T, T] padding & segment mask of packed
        rows (jaxbert.model.segments); True = attend. On the fused paths (takes_fused) the model passes
        int32 segment ids [B, T] instead: a query attends to the keys of its own segment.
      rope: (cos, sin) [B or 1, T, D] of this layer's theta.
      is_global: True for a full-attention layer, False for a sliding one; a traced bool
        scalar inside the scanned layer stack (then both paths are built and one runs).
    Returns:
      [B, T, H] and the attention probabilities [B, N, T, T] (or None).
    """

    @nn.compact
    def __call__(self, hidden_states, mask, rope, is_global, deterministic=True, output_attentions=False):
        cfg = self.config
        B, T, H = hidden_states.shape
        N, D = cfg.num_attention_heads, cfg.head_dim
        cos, sin = rope
        rate = cfg.attention_dropout
        impl = attention.path(self.options, attention.needs_probs(rate, deterministic, output_attentions))
        if impl in fused.FUSED_IMPLS:
            segments = mask if mask.dtype != jnp.bool_ else fused.key_segments(mask, T)
            # q (scaled), k (rotated) and v [B, N, T, D], laid out for the kernel by the matmul itself (rotary_qkv),
            # and Wo reading the context [B, N, T, D] as it comes
            q, k, v = self.linear(3 * H, ("embed", "heads"), "Wqkv", cfg.attention_bias, self.std_in, RotaryQKV,
                                  scale=D ** -0.5)(hidden_states, rope)
            context = fused.attend(q, k, v, segments, 1.0, cfg.half_window, impl, is_global, heads_first=True)
            out = self.linear_view(H, ("heads", "embed"), "Wo", cfg.attention_bias, self.std_out,
                                   "BNTD,NDH->BTH", (N, D, H), (H,))(context)
            return self.dropout_layer(rate)(out, deterministic=deterministic), None
        qkv = self.linear(3 * H, ("embed", "heads"), "Wqkv", cfg.attention_bias, self.std_in)(hidden_states)
        qkv = qkv.reshape(B, T, 3, N, D)  # transformers' q | k | v blocks, each head-major
        q, k, v = apply_rope(qkv[:, :, 0], cos, sin), apply_rope(qkv[:, :, 1], cos, sin), qkv[:, :, 2]
        if impl == "dot_product":
            window = None if is_global is True else cfg.half_window  # a config of global layers has none
            context = attention.dot_product_attention(q, k, v, mask, scale=D ** -0.5, window=window,
                                                      is_global=is_global)
            probs = None
        else:
            scale = jnp.asarray(D ** -0.5, self.options.dtype)  # rounded once, as transformers multiplies
            context, probs = attention.einsum_attention(
                self, q, k, v, self._full_mask(mask, T, is_global), scale, rate=rate, deterministic=deterministic,
                output_probs=output_attentions)
        out = self.linear(H, ("heads", "embed"), "Wo", cfg.attention_bias, self.std_out)(context.reshape(B, T, H))
        # transformers' out_drop: the attention_dropout rate again, on the projected output.
        return self.dropout_layer(rate)(out, deterministic=deterministic), probs

    def _full_mask(self, mask, T, is_global):
        """Padding (and segment) mask, narrowed to the band on sliding layers: [B, 1, 1 or T, T]."""
        if is_global is True:
            return mask
        near = band(T, self.config.half_window)
        if is_global is not False:  # traced: every key is near on a global layer
            near = near | is_global
        return mask & near
