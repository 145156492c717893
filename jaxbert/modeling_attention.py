"""BERT self- and cross-attention, with transformers' param names and its
relative position embeddings, in two implementations."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from .modeling_utils import Array, BertModule


class DenseParams(nn.Module):
    """The kernel [in, out] and bias [out] of a Dense, without applying it.

    BertSelfAttention keeps transformers' separate query/key/value params but
    multiplies by their concatenation: one [H, 3H] matmul instead of three.
    """

    features: int
    in_features: int
    axes: tuple
    stddev: float
    param_dtype: object = jnp.float32

    @nn.compact
    def __call__(self):
        kernel = self.param(
            "kernel", nn.with_logical_partitioning(nn.initializers.normal(self.stddev), self.axes),
            (self.in_features, self.features), self.param_dtype)
        bias = self.param(
            "bias", nn.with_logical_partitioning(nn.initializers.zeros, self.axes[1:]),
            (self.features,), self.param_dtype)
        return kernel, bias


def _project(x: Array, params: list[tuple[Array, Array]], dtype) -> list[Array]:
    """x [B, T, H] times several (kernel, bias) pairs fused into one matmul."""
    kernel = jnp.concatenate([k for k, _ in params], axis=1).astype(dtype)
    bias = jnp.concatenate([b for _, b in params]).astype(dtype)
    y = jnp.einsum("BTH,HF->BTF", x.astype(dtype), kernel) + bias
    sizes = [k.shape[1] for k, _ in params]
    return jnp.split(y, [sum(sizes[:i]) for i in range(1, len(sizes))], axis=-1)


class BertSelfAttention(BertModule):
    """Multi-head attention: self-attention, or cross-attention when ``kv`` is given.

    Args:
      hidden_states: [B, T, H] queries (and keys/values for self-attention).
      mask: bool [B, 1 or T, T or S] (broadcastable to [B, N, T, S]); True = attend.
      kv: [B, S, H] encoder states for cross-attention, else None.
      layer_head_mask: [N] multiplier of the attention probabilities, or None.
      is_cross: whether this is a cross-attention block (no relative positions there,
        as transformers forces absolute for cross-attention).
    Returns:
      context [B, T, H] and the attention probabilities [B, N, T, S] (or None).
    """

    is_cross: bool = False

    @nn.compact
    def __call__(self, hidden_states, mask, kv=None, layer_head_mask=None,
                 deterministic: bool = True, output_attentions: bool = False):
        cfg = self.config
        H, N, D = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        r = cfg.initializer_range
        q_p, k_p, v_p = (DenseParams(H, H, ("embed", "heads"), r, self.param_dtype, name=n)()
                         for n in ("query", "key", "value"))
        B, T, _ = hidden_states.shape
        if kv is None:
            q, k, v = _project(hidden_states, [q_p, k_p, v_p], self.dtype)
        else:
            (q,) = _project(hidden_states, [q_p], self.dtype)
            k, v = _project(kv, [k_p, v_p], self.dtype)
        S = k.shape[1]
        # [B, T, H] -> [B, T, N, D]
        q, k, v = (x.reshape(B, x.shape[1], N, D) for x in (q, k, v))

        bias = None  # additive score bias [B or 1, N or 1, T, S], already scaled
        pos_type = "absolute" if self.is_cross else cfg.position_embedding_type
        if pos_type != "absolute":
            bias = self._relative_scores(q, k, pos_type) / jnp.sqrt(jnp.float32(D)).astype(self.dtype)

        dropout = cfg.attention_probs_dropout_prob
        needs_probs = (output_attentions or layer_head_mask is not None
                       or (not deterministic and dropout > 0))
        if self.attention_impl == "dot_product" and not needs_probs:
            # jax.nn.dot_product_attention has no dropout, head mask or probs
            # output; anything that needs them takes the einsum path below.
            context = jax.nn.dot_product_attention(
                q, k, v, bias=bias, mask=jnp.broadcast_to(mask, (B, N, T, S)))
            return context.reshape(B, T, H), None

        scores = jnp.einsum("BTND,BSND->BNTS", q, k) / jnp.sqrt(jnp.float32(D)).astype(self.dtype)
        if bias is not None:
            scores = scores + bias
        # softmax in fp32 even under bf16 compute: it is where precision goes.
        scores = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
        probs = nn.Dropout(dropout)(probs, deterministic=deterministic)
        if layer_head_mask is not None:
            probs = probs * layer_head_mask[None, :, None, None].astype(self.dtype)
        context = jnp.einsum("BNTS,BSND->BTND", probs, v)
        return context.reshape(B, T, H), (probs if output_attentions else None)

    def _relative_scores(self, q, k, pos_type):
        """transformers' relative_key(_query) scores [B, N, T, S], before scaling."""
        cfg = self.config
        P = cfg.max_position_embeddings
        distance_embedding = nn.Embed(
            2 * P - 1, cfg.head_dim, dtype=self.dtype, param_dtype=self.param_dtype,
            embedding_init=nn.with_logical_partitioning(
                nn.initializers.normal(cfg.initializer_range), (None, None)),
            name="distance_embedding")
        T, S = q.shape[1], k.shape[1]
        # Queries are the last T of the S positions (equal when there is no cache).
        pos_q = jnp.arange(T)[:, None] + (S - T)
        pos_k = jnp.arange(S)[None, :]
        rel = distance_embedding(pos_q - pos_k + P - 1)  # [T, S, D]
        scores = jnp.einsum("BTND,TSD->BNTS", q, rel)
        if pos_type == "relative_key_query":
            scores = scores + jnp.einsum("BSND,TSD->BNTS", k, rel)
        return scores


def attention_mask_bool(attention_mask: Optional[Array], shape, causal: bool) -> Array:
    """[B, S] 0/1 mask (None = all ones) -> bool [B, 1, T, S], with the causal part."""
    B, T = shape
    if attention_mask is None:
        mask = jnp.ones((B, 1, 1, T), bool)
    else:
        mask = attention_mask.astype(bool)[:, None, None, :]
    if causal:
        S = mask.shape[-1]
        causal_mask = jnp.arange(T)[:, None] + (S - T) >= jnp.arange(S)[None, :]
        mask = mask & causal_mask[None, None]
    return mask
