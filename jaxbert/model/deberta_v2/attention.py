"""DeBERTa's disentangled self-attention: content-to-content scores plus the relative terms pos_att_type names,
content-to-position (c2p: each query against the embedding of its key's relative position) and
position-to-content (p2c: each key against the embedding of the query's relative position), all divided by
sqrt(head_dim * (1 + number of terms)).

Relative positions are i - j for query i and key j; with position_buckets > 0 they are log-bucketed beyond
position_buckets // 2 up to max_relative_positions (``relative_positions``, computed on the host in float32 as
transformers computes them, so that the buckets are the same integers). Both terms read the relative-embedding
table at clamp(bucket(i - j) + span, 0, 2 span - 1), span = position_buckets or max_relative_positions.

Neither term gathers a [B, N, T, T] index (a gather, and a scatter-add in the backward, that reads and writes
buffers the size of the scores). ModelOptions.relative_impl picks one of three ways, with the same values:
``skew`` (``relative_bias``): both indices depend on i - j alone, so the projected table's rows are taken once per
distance (``distance_index``, 2T - 1 rows of [2 span, N, D]), each query (c2p) or key (p2c) scored against every
distance, and the [.., T, 2T - 1] scores skewed to [.., T, T] by reshapes and a slice (``relative_shift``);
``onehot`` (``onehot_bias``): each query or key scored against the table rows the indices reach, and each score's
row picked by a matmul with a constant one-hot [T, rows, T] (one nonzero product per sum, so exact), batched over
the query (c2p) or key (p2c). On TPU a reshape of the two minor axes is a relayout copy, and the skew's reshapes
are most of a DeBERTa step's memory traffic; the one-hot matmul runs on the MXU instead, for more FLOPs (which
the MFU counts do not count: jaxbert.model.deberta_v2.family).
``fused`` (jaxbert.model.deberta_v2.kernel) runs the whole attention, both terms, the mask, softmax and dropout, in
one Pallas kernel per sequence and head, with no [B, N, T, T] array in HBM. ``auto`` (``relative_impl``) runs fused
where the model is compiled for a TPU v5 or later (jaxbert.model.options.target_kind; up to a padded length of
512), onehot on an older TPU, skew elsewhere.

Outside the kernel the relative terms are an additive [B, N, T, T] score bias formed from the queries and keys
themselves, which the generic fused paths do not take: the layers run ``einsum`` (whole, or in attention_chunks
blocks of queries); the family's build runs attention_impl ``auto`` as einsum and refuses ``dot_product``,
``blocked`` and ``splash`` by name (docs/attention.md).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.model.deberta_v2 import kernel
from jaxbert.model.deberta_v2.base import DebertaV2Module
from jaxbert.model.layers import attention
from jaxbert.model.options import target_kind


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


def distance_index(config, length: int) -> np.ndarray:
    """int32 [2T - 1]: the table row for distance d = T - 1 - m at m (d from T - 1 down to -(T - 1)), read off
    relative_index (row i - j of its [T, T] depends on i - j alone): column 0 upwards, then row 0."""
    index = relative_index(config, length)
    return np.concatenate([index[::-1, 0], index[0, 1:]]).astype(np.int32)


def relative_shift(x):
    """[.., T, 2T - 1] -> [.., T, T]: out[.., i, j] = x[.., i, j + T - 1 - i], by flattening the last two axes
    (row i starts at i (2T - 1)), dropping the first T - 1 entries, and reading rows of 2T - 2: entry (i, j) then
    lies at i (2T - 1) + T - 1 - i + j. No gather."""
    *lead, T, W = x.shape
    if T == 1:
        return x
    flat = x.reshape(*lead, T * W)[..., T - 1:T - 1 + T * (W - 1)]
    return flat.reshape(*lead, T, W - 1)[..., :T]


def relative_bias(config, q, k, pos_key, pos_query, scale):
    """The relative terms' score bias [B, N, T, T], already divided by scale: c2p[i, j] = q_i . pos_key[row(i - j)]
    and p2c[i, j] = k_j . pos_query[row(i - j)] (pos_key / pos_query [2 span, N, D], None for a term not in
    att_terms), each query or key scored against all 2T - 1 distances, then skewed."""
    T = q.shape[1]
    dist = distance_index(config, T)  # m -> the row for d = T - 1 - m
    bias = None
    if "c2p" in config.att_terms:
        c2p = jnp.einsum("BTND,MND->BNTM", q, pos_key[jnp.asarray(dist)])
        bias = relative_shift(c2p) / scale
    if "p2c" in config.att_terms:  # key j's row in the skew is d = j - i: the distances reversed, then keys last
        p2c = jnp.einsum("BSND,MND->BNSM", k, pos_query[jnp.asarray(dist[::-1].copy())])
        p2c = jnp.swapaxes(relative_shift(p2c), -1, -2) / scale
        bias = p2c if bias is None else bias + p2c
    return bias


def relative_impl(options, length: int | None = None, dropout: bool = False, output_attentions: bool = False,
                  query_mask: bool = False) -> str:
    """The path a layer runs: options.relative_impl, with auto resolved (fused where the model is compiled for a
    TPU v5 or later and the padded length is at most kernel.FUSED_MAX_LENGTH, skew elsewhere) and fused kept to
    what the kernel computes: no probabilities returned (output_attentions), and attention dropout (`dropout`:
    active in this call) only with dropout_impl "hash", and a key mask only (`query_mask`: a per-query mask, a
    module called by hand). Where fused cannot run, the TPU's onehot or the skew elsewhere. fused asked for
    where the target is a TPU before v5 is refused (ValueError): Mosaic rotates with a stride from v5 on."""
    impl = options.relative_impl
    kind = target_kind()
    tpu = kind.lower().startswith("tpu")
    if impl in ("auto", "fused"):
        if tpu and not kernel.rotates_with_stride(kind):
            if impl == "fused":
                raise ValueError(f"relative_impl 'fused': the kernel's strided rotation needs a TPU v5 or later "
                                 f"(compiling for {kind}); use 'onehot' or 'auto'")
            return "onehot"
        fusable = not output_attentions and not query_mask and (not dropout or options.dropout_impl == "hash")
        fits = impl == "fused" or length is None or kernel.padded_length(length) <= kernel.FUSED_MAX_LENGTH
        if fusable and fits and (impl == "fused" or tpu):
            return "fused"
        return "onehot" if tpu else "skew"
    return impl


def onehot_pick(scores, index):
    """scores [T, B, N, R] and index int [T, S] (values in [0, R)) -> scores[t, b, n, index[t, s]] as [B, N, T, S]:
    a matmul batched over t with the one-hot [T, R, S] (index[t, s] == r), built in the graph from iota and
    compare. One nonzero product per sum, so the values are exact in any dtype (HIGHEST precision, so that a float32
    model's scores are not rounded to bfloat16 on the way)."""
    R = scores.shape[-1]
    onehot = jnp.asarray(index)[:, None, :] == jax.lax.broadcasted_iota(jnp.int32, (1, R, 1), 1)
    return jnp.einsum("tBNr,trs->BNts", scores, onehot.astype(scores.dtype), precision=jax.lax.Precision.HIGHEST)


def onehot_bias(config, q, k, pos_key, pos_query, scale):
    """relative_bias's values by onehot_pick: each query (c2p) or key (p2c) scored against the table rows
    relative_index reaches (at most 2T - 1 of the 2 span), each score's row then picked by the one-hot matmul.
    The table rows are divided by scale, not the [B, N, T, T] terms (the same values up to rounding)."""
    index = relative_index(config, q.shape[1])
    lo, hi = int(index.min()), int(index.max()) + 1
    index = index - lo
    bias = None
    if "c2p" in config.att_terms:  # c2p[i, j] = q_i . pos_key[index[i, j]]: batched over the query i
        bias = onehot_pick(jnp.einsum("BTND,RND->TBNR", q, pos_key[lo:hi] / scale), index)
    if "p2c" in config.att_terms:  # p2c[i, j] = k_j . pos_query[index[i, j]]: batched over the key j
        p2c = onehot_pick(jnp.einsum("BSND,RND->SBNR", k, pos_query[lo:hi] / scale), index.T)
        p2c = jnp.swapaxes(p2c, -1, -2)
        bias = p2c if bias is None else bias + p2c
    return bias


BIAS = {"skew": relative_bias, "onehot": onehot_bias}


def scale_value(config) -> float:
    """sqrt(head_dim * scale_factor), taken in float32 (as transformers takes it whatever the model's dtype)."""
    return float(np.sqrt(np.float32(config.head_dim * config.scale_factor)))


def scale_of(config, dtype):
    """scale_value in the compute dtype (the einsum paths scale there; the fused kernel in float32)."""
    return jnp.asarray(scale_value(config), dtype)


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
        rate = cfg.attention_probs_dropout_prob
        impl = relative_impl(opts, T, not deterministic and rate > 0, output_attentions,
                             query_mask=mask.shape[-2] != 1)
        bias = pos_key = pos_query = None
        if cfg.relative_attention:
            rel = self.dropout_layer(cfg.hidden_dropout_prob)(rel_embeddings, deterministic=deterministic)
            if cfg.share_att_key:  # the content projections, biases included, on the relative embeddings
                pos_query = heads(query(rel)) if "p2c" in terms else None
                pos_key = heads(key(rel)) if "c2p" in terms else None
            else:
                pos_key = heads(self.proj("pos_key_proj")(rel)) if "c2p" in terms else None
                pos_query = heads(self.proj("pos_query_proj")(rel)) if "p2c" in terms else None
            if impl != "fused":
                bias = BIAS[impl](cfg, q, k, pos_key, pos_query, scale)
        if impl == "fused":
            active = not deterministic and rate > 0
            context = kernel.disentangled_attention(
                q, k, v, pos_key, pos_query, jnp.broadcast_to(mask[:, 0, 0, :], (B, T)),
                lambda length: distance_index(cfg, length), scale_value(cfg),
                rate=rate if active else 0.0, dropout_key=self.dropout_layer(rate).draw_key() if active else None)
            return context.reshape(B, T, H), None
        # content scores as transformers forms them: q times (k / scale), then the relative terms added
        context, probs = attention.einsum_attention(
            self, q, k / scale, v, mask, jnp.asarray(1, opts.dtype), bias=bias,
            rate=cfg.attention_probs_dropout_prob, deterministic=deterministic, output_probs=output_attentions)
        return context.reshape(B, T, H), probs
