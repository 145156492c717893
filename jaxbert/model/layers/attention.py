"""The attention entry point every family calls: which path a call takes (`path`), and the paths that form
the scores, whole or in blocks of queries (`einsum_attention`), or hand them to jax
(`dot_product_attention`). The paths that never form the [B, N, T, S] scores (blocked, splash, auto) are
jaxbert.model.fused's `attend`, taken where `path` names them.

Shapes: q [B, T, N, D]; k, v [B, S, K, D] with K dividing N (grouped-query attention: query head n reads
key/value head n // (N / K)); mask bool, broadcastable to [B, 1, T, S], True = attend.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxbert.model import fused
from jaxbert.model.dropout import apply_hash_dropout
from jaxbert.model.segments import segment_mask
from jaxbert.model.softmax import masked_softmax

Array = jax.Array


def path(options, needs_probs: bool, fusable: bool = True) -> str:
    """The implementation an attention call runs: options.attention_impl where it can, else a fallback.

    needs_probs: the probabilities are wanted (returned, dropped out in training, multiplied by a head mask):
      only "einsum" forms them. fusable: the call is what the fused paths take (an encoder's self-attention
      under a padding or packed-documents mask, no additive position bias, no cache).
    The fused paths take float32 and bfloat16 (splash), so a float64 model runs "blocked" where "splash" or
    "auto" is asked for; jax.nn.dot_product_attention takes its softmax in float32, so float64 falls back to
    "einsum" there.
    """
    impl = options.attention_impl
    wide = jnp.dtype(options.dtype) == jnp.float64
    if impl in fused.FUSED_IMPLS and fusable and not needs_probs:
        return "blocked" if wide else impl
    if impl == "dot_product" and not needs_probs and not wide:
        return "dot_product"
    return "einsum"


def describe(options) -> str:
    """The path an encoder's self-attention takes under these options, in words (from_pretrained logs it)."""
    impl = path(options, needs_probs=False)
    if impl == "einsum":
        return "einsum (the [B, N, T, S] scores are formed)"
    return (f"{impl}; einsum where the probabilities are wanted (output_attentions, a head mask, attention dropout "
            "in training) or the call is not an encoder's self-attention")


def needs_probs(dropout_rate: float, deterministic: bool, output_attentions: bool) -> bool:
    """Whether a self-attention without head mask wants its probabilities: returned, or dropped out in training."""
    return output_attentions or (not deterministic and dropout_rate > 0)


def takes_fused(options, dropout_rate: float, deterministic: bool, output_attentions: bool) -> bool:
    """Whether an encoder's self-attention (no position bias, no head mask) runs one of jaxbert.model.fused's
    paths; its model then hands the layers segment ids [B, T] instead of a dense mask (layer_mask)."""
    return path(options, needs_probs(dropout_rate, deterministic, output_attentions)) in fused.FUSED_IMPLS


def layer_mask(fused_path: bool, attention_mask, segment_ids, shape: tuple) -> Array:
    """What an encoder's layers attend by, formed once for the stack: on the fused paths int32 segment ids [B, T]
    (a token attends to its document's keys; padding, attention_mask 0, is no real token's key: in a packed row a
    segment of its own, fused.PAD_SEGMENT; in an unpacked row fused.PAD_QUERY, whose queries read the row's real
    tokens as the einsum path's do); else bool [B, 1, 1, T] (padding), or [B, 1, T, T]
    within each document of packed rows (segment_ids [B, T]; a sliding layer narrows it to its band)."""
    B, T = shape
    if fused_path:
        mask = jnp.ones((B, T), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)
        if attention_mask is not None:  # an unpacked row's padding reads its real tokens, as einsum's does
            pad = fused.PAD_QUERY if segment_ids is None else fused.PAD_SEGMENT
            mask = jnp.where(attention_mask.astype(bool), mask, pad)
        return mask
    mask = jnp.ones((B, 1, 1, T), bool) if attention_mask is None else attention_mask.astype(bool)[:, None, None, :]
    return mask if segment_ids is None else mask & segment_mask(segment_ids)[:, None]


def share_kv(k: Array, v: Array, heads: int) -> tuple[Array, Array]:
    """k, v [B, S, K, D] repeated to [B, S, heads, D] (each of the K heads serves heads / K queries)."""
    groups = heads // k.shape[2]
    if groups == 1:
        return k, v
    return jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)


def einsum_attention(module, q: Array, k: Array, v: Array, mask: Array, scale, *, divide: bool = False,
                     bias=None, head_mask=None, rate: float = 0.0, deterministic: bool = True,
                     output_probs: bool = False):
    """softmax(q k^T * scale + bias) v under mask -> context [B, T, N, D] and the probabilities [B, N, T, S]
    (output_probs) or None.

    scale: a scalar of the compute dtype; `divide` divides by it instead (BERT divides by sqrt(D), as
    transformers does, ModernBERT and EuroBERT multiply by D ** -0.5: the roundings differ). bias [.., T, S]:
    an additive score bias, already scaled. head_mask [N]: multiplies the probabilities after dropout.
    rate: attention dropout (the module's dropout layer). With options.attention_chunks > 1 (and no
    probabilities returned) the queries run in blocks, each recomputed in the backward pass, so one block's
    scores are held at a time; the result is the same, dropout included (HashDropout's mask is a function of
    position: blocks need dropout_impl "hash").
    """
    k, v = share_kv(k, v, q.shape[2])
    B, T, N, D = q.shape
    S = k.shape[1]
    opts = module.options
    head = None if head_mask is None else head_mask[None, :, None, None].astype(opts.dtype)

    def probabilities(qc, kk, mc, bc):
        scores = jnp.einsum("BTND,BSND->BNTS", qc, kk)
        scores = scores / scale if divide else scores * scale
        if bc is not None:
            scores = scores + bc
        return masked_softmax(scores, mc)

    chunks = opts.attention_chunks
    if chunks > 1 and T % chunks == 0 and not output_probs:
        C = T // chunks
        key = None
        if not deterministic and rate > 0:
            module.require_hash_dropout("attention_chunks", "attention")
            key = module.dropout_layer(rate).draw_key()
        rows_mask = mask.shape[2] != 1
        if rows_mask:
            mask = jnp.broadcast_to(mask, (mask.shape[0], 1, T, S))

        def block(qc, kk, vv, mc, bc, hc, kc, t0):
            probs = probabilities(qc, kk, mc, bc)
            if kc is not None:
                probs = apply_hash_dropout(probs, kc, rate, whole=(B, N, T, S), start=(0, 0, t0, 0))
            if hc is not None:
                probs = probs * hc
            return jnp.einsum("BNTS,BSND->BTND", probs, vv)

        out = []
        for i in range(chunks):
            rows = slice(i * C, (i + 1) * C)
            fn = jax.checkpoint(functools.partial(block, t0=i * C))
            out.append(fn(q[:, rows], k, v, mask[:, :, rows] if rows_mask else mask,
                          None if bias is None else bias[:, :, rows], head, key))
        return jnp.concatenate(out, axis=1), None

    probs = probabilities(q, k, mask, bias)
    probs = module.dropout_layer(rate)(probs, deterministic=deterministic)
    if head is not None:
        probs = probs * head
    context = jnp.einsum("BNTS,BSND->BTND", probs, v)
    return context, (probs if output_probs else None)


def dot_product_attention(q: Array, k: Array, v: Array, mask: Array, *, scale=None, bias=None, window=None,
                          is_global=True) -> Array:
    """jax.nn.dot_product_attention (its XLA implementation) -> context [B, T, N, D]; the mask is passed
    [B, N, T, S] as the API takes it. scale None: jax's 1 / sqrt(D).

    window: a sliding layer's half window w (keys within w of the query, ANDed with the mask by jax's
    local_window_size), or None. is_global: True / False for a layer of static kind; a traced bool in a
    scanned stack, where lax.cond runs the one branch of the layer's kind."""
    k, v = share_kv(k, v, q.shape[2])
    B, T, N, _ = q.shape
    full = jnp.broadcast_to(mask, (B, N, T, k.shape[1]))
    attend = functools.partial(jax.nn.dot_product_attention, scale=scale, bias=bias)
    if window is None or is_global is True:
        return attend(q, k, v, mask=full)
    if is_global is False:
        return attend(q, k, v, mask=full, local_window_size=(window, window))
    return jax.lax.cond(is_global, lambda q, k, v, m: attend(q, k, v, mask=m),
                        lambda q, k, v, m: attend(q, k, v, mask=m, local_window_size=(window, window)),
                        q, k, v, full)
