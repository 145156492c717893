"""BERT self- and cross-attention, with transformers' param names and its
relative position embeddings, in the implementations ModelOptions names (einsum, dot_product, and
jaxbert.model.fused's blocked, splash and auto for an encoder's self-attention)."""

from __future__ import annotations

import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model import fused
from jaxbert.model.base import Array, BertModule
from jaxbert.model.layers import attention



class BertSelfAttention(BertModule):
    """Multi-head attention: self-attention, or cross-attention when ``is_cross``.

    Args:
      hidden_states: [B, T, H] queries (and keys/values for self-attention).
      mask: bool padding mask broadcastable to [B, 1, T, S]; True = attend. The
        causal part (config.is_decoder) is added here, where the cache offset is known.
      kv: [B, S, H] encoder states for cross-attention; None reads them from the cache. For
        self-attention: the states keys and values come from when the queries are a subset of
        them (the first token of the last layer, ModelOptions.first_token_only); None = hidden_states.
      layer_head_mask: [N] multiplier of the attention probabilities, or None.
    Returns:
      context [B, T, H] and the attention probabilities [B, N, T, S] (or None).

    With ``decode`` set, keys and values live in the 'cache' collection: init
    sizes the self-attention cache from its input [B, max_len, H]; each apply
    writes the T new keys at cache_index and attends over the whole cache.
    Cross-attention caches the projected encoder states once.
    """

    is_cross: bool = False

    @nn.compact
    def __call__(self, hidden_states, mask, kv=None, layer_head_mask=None,
                 deterministic: bool = True, output_attentions: bool = False):
        cfg = self.config
        H, N, D = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        # Three [H, H] matmuls, one per transformers param: a fused [H, 3H] matmul would need the
        # kernels concatenated on every step, a copy XLA cannot fold into the dot.
        query, key, value = (self.dense(H, ("embed", "heads"), n) for n in ("query", "key", "value"))
        B, T, _ = hidden_states.shape
        split_heads = lambda x: x.reshape(B, x.shape[1], N, D)  # [B, T, H] -> [B, T, N, D]
        offset = 0  # position of the first query among the keys
        q = split_heads(query(hidden_states))
        if not self.is_cross:
            source = hidden_states if kv is None else kv
            k, v = split_heads(key(source)), split_heads(value(source))
            if self.options.decode:
                k, v, offset, valid = self._update_cache(k, v)
                mask = mask & valid
        else:
            k, v = self._cross_kv(kv, key, value, split_heads)
        S = k.shape[1]
        if cfg.is_decoder and not self.is_cross:
            mask = mask & (jnp.arange(T)[:, None] + offset >= jnp.arange(S)[None, :])

        # sqrt(D) taken in Python (double) and rounded once to the compute dtype,
        # as transformers divides by math.sqrt(head_dim).
        scale = jnp.asarray(math.sqrt(D), self.options.dtype)
        bias = None  # additive score bias [1, N, T, S], already scaled
        # transformers uses absolute positions (none in attention) for cross-attention.
        pos_type = "absolute" if self.is_cross else cfg.position_embedding_type
        if pos_type != "absolute":
            bias = self._relative_scores(q, k, pos_type, offset) / scale

        dropout = cfg.attention_probs_dropout_prob
        needs_probs = (output_attentions or layer_head_mask is not None
                       or (not deterministic and dropout > 0))
        # The fused paths take an encoder's self-attention under a padding or packed-documents mask, without
        # position biases, probabilities or a head mask: BertModel then hands the layers int32 segment ids
        # [B, T], formed once for the stack; a dense bool mask (BertEncoder called directly) is read back.
        fusable = (bias is None and not self.is_cross and not cfg.is_decoder and not self.options.decode
                   and kv is None)
        impl = attention.path(self.options, needs_probs, fusable)
        if impl in fused.FUSED_IMPLS:
            segments = mask if mask.ndim == 2 else fused.key_segments(mask, T)
            context = fused.attend(q, k, v, segments, D ** -0.5, None, impl)
            return context.reshape(B, T, H), None
        if mask.ndim == 2:
            raise ValueError(f"BertSelfAttention: segment ids [B, T] reach the {impl} path (the layers and their "
                             "model disagree on the attention path)")
        if impl == "dot_product":
            context = attention.dot_product_attention(q, k, v, mask, bias=bias)
            return context.reshape(B, T, H), None
        context, probs = attention.einsum_attention(
            self, q, k, v, mask, scale, divide=True, bias=bias, head_mask=layer_head_mask, rate=dropout,
            deterministic=deterministic, output_probs=output_attentions)
        return context.reshape(B, T, H), probs

    def _update_cache(self, k, v):
        """Write k, v [B, T, N, D] at cache_index; return the whole cache, the
        query offset and a bool [1, 1, 1, max_len] mask of filled slots."""
        initializing = not self.has_variable("cache", "cached_key")
        cached_k = self.variable("cache", "cached_key", jnp.zeros, k.shape, k.dtype)
        cached_v = self.variable("cache", "cached_value", jnp.zeros, v.shape, v.dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.array(0, jnp.int32))
        if initializing:  # init: the input's length is the cache's length
            return k, v, 0, jnp.ones((1, 1, 1, k.shape[1]), bool)
        start = index.value
        T = k.shape[1]
        cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k.astype(cached_k.value.dtype), (0, start, 0, 0))
        cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v.astype(cached_v.value.dtype), (0, start, 0, 0))
        index.value = start + T
        valid = jnp.arange(cached_k.value.shape[1]) < start + T
        return cached_k.value, cached_v.value, start, valid[None, None, None, :]

    def _cross_kv(self, kv, key, value, split_heads):
        """Project encoder states [B, S, H]; under decode, cache them and reuse when kv is None."""
        if not self.options.decode:
            return split_heads(key(kv)), split_heads(value(kv))
        if kv is None:
            if not self.has_variable("cache", "cross_key"):
                raise ValueError("cross-attention needs encoder_hidden_states on the first call")
            return self.get_variable("cache", "cross_key"), self.get_variable("cache", "cross_value")
        k, v = split_heads(key(kv)), split_heads(value(kv))
        self.put_variable("cache", "cross_key", k)
        self.put_variable("cache", "cross_value", v)
        return k, v

    def _relative_scores(self, q, k, pos_type, offset):
        """transformers' relative_key(_query) scores [B, N, T, S], before scaling."""
        cfg = self.config
        P = cfg.max_position_embeddings
        distance_embedding = nn.Embed(
            2 * P - 1, cfg.head_dim, dtype=self.options.dtype, param_dtype=self.options.param_dtype,
            embedding_init=nn.with_logical_partitioning(
                nn.initializers.normal(cfg.initializer_range), (None, None)),
            name="distance_embedding")
        T, S = q.shape[1], k.shape[1]
        pos_q = jnp.arange(T)[:, None] + offset
        pos_k = jnp.arange(S)[None, :]
        rel = distance_embedding(jnp.clip(pos_q - pos_k + P - 1, 0, 2 * P - 2))  # [T, S, D]
        scores = jnp.einsum("BTND,TSD->BNTS", q, rel)
        if pos_type == "relative_key_query":
            scores = scores + jnp.einsum("BSND,TSD->BNTS", k, rel)
        return scores


def padding_mask(attention_mask: Optional[Array], batch: int, length: int) -> Array:
    """[B, S] 0/1 mask -> bool [B, 1, 1, S]; None attends everywhere ([B, 1, 1, 1]
    broadcasts over any key length, the decode cache's included)."""
    if attention_mask is None:
        return jnp.ones((batch, 1, 1, 1), bool)
    return attention_mask.astype(bool)[:, None, None, :]
