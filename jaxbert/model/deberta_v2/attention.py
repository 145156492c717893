"""DeBERTa's disentangled self-attention: content-to-content scores plus the relative terms pos_att_type names,
content-to-position (c2p: each query against the embedding of its key's relative position) and
position-to-content (p2c: each key against the embedding of the query's relative position), all divided by
sqrt(head_dim * (1 + number of terms)).

Relative positions are i - j for query i and key j; with position_buckets > 0 they are log-bucketed beyond
position_buckets // 2 up to max_relative_positions (``relative_positions``, computed on the host in float32 as
transformers computes them, so that the buckets are the same integers). Both terms read the relative-embedding
table at clamp(bucket(i - j) + span, 0, 2 span - 1), span = position_buckets or max_relative_positions.

The relative terms are an additive [B, N, T, T] score bias formed from the queries and keys themselves, which no
fused kernel takes: the layers run ``einsum`` (whole, or in attention_chunks blocks of queries); the family's build
runs ``auto`` as einsum and refuses ``dot_product``, ``blocked`` and ``splash`` by name (docs/attention.md).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxbert.model.deberta_v2.base import DebertaV2Module
from jaxbert.model.layers import attention


@functools.lru_cache(maxsize=64)
def relative_positions(length: int, buckets: int, max_position: int) -> np.ndarray:
    """int32 [T, T]: i - j, log-bucketed where buckets > 0 (transformers' make_log_bucket_position: within
    buckets // 2 of the query the distance itself, beyond it mid + ceil(log(|d| / mid) / log((max - 1) / mid)
    * (mid - 1)) with d's sign; the logs in float32)."""
    ids = np.arange(length, dtype=np.int64)
    rel = ids[:, None] - ids[None, :]
    if buckets <= 0 or max_position <= 0:
        return rel.astype(np.int32)
    mid = buckets // 2
    sign = np.sign(rel)
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    f32 = np.float32
    ratio = abs_pos.astype(f32) / f32(mid)
    log_pos = np.ceil(np.log(ratio) / np.log(f32((max_position - 1) / mid)) * f32(mid - 1)) + f32(mid)
    return np.where(abs_pos <= mid, rel.astype(f32), log_pos * sign).astype(np.int32)


def relative_index(config, length: int) -> np.ndarray:
    """int32 [T, T]: the row of the relative-embedding table both terms read for query i, key j."""
    span = config.att_span
    rel = relative_positions(length, config.position_buckets, config.max_relative)
    return np.clip(rel + span, 0, 2 * span - 1).astype(np.int32)


def scale_of(config, dtype):
    """sqrt(head_dim * scale_factor), taken in float32 (as transformers takes it whatever the model's dtype), in
    the compute dtype."""
    return jnp.asarray(np.sqrt(np.float32(config.head_dim * config.scale_factor)), dtype)


class DisentangledSelfAttention(DebertaV2Module):
    """query_proj, key_proj, value_proj (and pos_key_proj / pos_query_proj unless share_att_key) -> scores.

    Args:
      hidden_states: [B, T, H].
      mask: bool [B, 1, T, T] (query and key both real, as transformers masks) or broadcastable to it.
      rel_embeddings: [2 span, H] (already layer-normed where norm_rel_ebd says so), or None without
        relative_attention.
    Returns:
      context [B, T, H] and the probabilities [B, N, T, T] (output_attentions) or None.
    """

    def proj(self, name: str):
        return self.dense(self.config.hidden_size, ("embed", "heads"), name)

    @nn.compact
    def __call__(self, hidden_states, mask, rel_embeddings, deterministic=True, output_attentions=False):
        cfg, opts = self.config, self.options
        B, T, H = hidden_states.shape
        N, D = cfg.num_attention_heads, cfg.head_dim
        heads = lambda x: x.reshape(*x.shape[:-1], N, D)
        query, key = self.proj("query_proj"), self.proj("key_proj")
        q, k = heads(query(hidden_states)), heads(key(hidden_states))
        v = heads(self.proj("value_proj")(hidden_states))
        scale = scale_of(cfg, opts.dtype)
        terms = cfg.att_terms
        bias = None
        if cfg.relative_attention:
            rel = self.dropout_layer(cfg.hidden_dropout_prob)(rel_embeddings, deterministic=deterministic)
            if cfg.share_att_key:  # the content projections, biases included, on the relative embeddings
                pos_query = heads(query(rel)) if "p2c" in terms else None
                pos_key = heads(key(rel)) if "c2p" in terms else None
            else:
                pos_key = heads(self.proj("pos_key_proj")(rel)) if "c2p" in terms else None
                pos_query = heads(self.proj("pos_query_proj")(rel)) if "p2c" in terms else None
            index = jnp.asarray(relative_index(cfg, T))
            if "c2p" in terms:  # query i against the key's relative position: [B, N, T, 2 span] gathered to [.., T, T]
                c2p = jnp.einsum("BTND,RND->BNTR", q, pos_key)
                bias = jnp.take_along_axis(c2p, jnp.broadcast_to(index, (B, N, T, T)), axis=-1) / scale
            if "p2c" in terms:  # key j against the query's relative position, then keys last
                p2c = jnp.einsum("BSND,RND->BNSR", k, pos_query)
                p2c = jnp.take_along_axis(p2c, jnp.broadcast_to(index.T, (B, N, T, T)), axis=-1)
                p2c = jnp.swapaxes(p2c, -1, -2) / scale
                bias = p2c if bias is None else bias + p2c
        # content scores as transformers forms them: q times (k / scale), then the relative terms added
        context, probs = attention.einsum_attention(
            self, q, k / scale, v, mask, jnp.asarray(1, opts.dtype), bias=bias,
            rate=cfg.attention_probs_dropout_prob, deterministic=deterministic, output_probs=output_attentions)
        return context.reshape(B, T, H), probs
