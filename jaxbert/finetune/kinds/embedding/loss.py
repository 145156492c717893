"""The embedding kind's pooling and contrastive loss, on arrays (no model, no data).

``pool`` turns a model's last hidden states [N, L, H] into one vector per text (mean over the
attended tokens, [CLS], or the last attended token), ``normalise`` scales it to unit length.
``contrastive_loss`` takes the embeddings of one global batch laid out [B, C, D] (column 0 the
anchors, column 1 their positives, columns 2.. hard negatives) and returns InfoNCE of each
anchor over every candidate of the batch: the B positives and the B x (C - 2) hard negatives,
in the order sentence-transformers' MultipleNegativesRankingLoss scores them (positives first,
then each negative column). ``symmetric`` adds the positives-to-anchors term and halves the sum
(MultipleNegativesSymmetricRankingLoss); ``dims`` sums the loss over truncated, re-normalised
prefixes of the embedding (MatryoshkaLoss with weights 1). Everything is taken in float32 at least.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

POOLINGS = ("mean", "cls", "last")


def pool(hidden: jax.Array, mask: jax.Array, how: str) -> jax.Array:
    """[N, L, H] hidden states, [N, L] attention mask -> [N, H] (float32 at least)."""
    hidden = hidden.astype(jnp.promote_types(hidden.dtype, jnp.float32))
    mask = mask.astype(hidden.dtype)
    if how == "mean":
        total = jnp.einsum("nlh,nl->nh", hidden, mask)
        return total / jnp.maximum(jnp.sum(mask, -1, keepdims=True), 1e-9)
    if how == "cls":
        return hidden[:, 0]
    if how == "last":  # the last attended token (padding on the right)
        last = jnp.maximum(jnp.sum(mask, -1).astype(jnp.int32) - 1, 0)
        return jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
    raise ValueError(f"pooling {how!r}: expected one of {', '.join(POOLINGS)}")


def normalise(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    """x / ||x|| over the last axis (torch.nn.functional.normalize's eps)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def _cross_entropy(scores: jax.Array, rows=None, cols=None) -> jax.Array:
    """Mean over the rows of -log softmax(scores[i])[i]; rows / cols: which rows count and which
    columns are candidates at all (padding rows of a last batch are neither)."""
    n = scores.shape[0]
    if cols is not None:
        scores = jnp.where(cols[None, :], scores, -1e9)
    logp = jax.nn.log_softmax(scores, axis=-1)
    nll = -logp[jnp.arange(n), jnp.arange(n)]
    if rows is None:
        return jnp.mean(nll)
    return jnp.sum(jnp.where(rows, nll, 0.0)) / jnp.maximum(jnp.sum(rows), 1)


def info_nce(emb: jax.Array, scale, symmetric: bool = False, valid=None) -> jax.Array:
    """InfoNCE of [B, C, D] unit embeddings: anchors emb[:, 0] against every candidate emb[:, 1:];
    valid [B]: the real rows (None: all)."""
    anchors = emb[:, 0]
    b, c = emb.shape[:2]
    # candidates column after column, as torch.cat(embeddings[1:]) lays them out
    candidates = jnp.swapaxes(emb[:, 1:], 0, 1).reshape(-1, emb.shape[-1])
    scores = scale * (anchors @ candidates.T)  # [B, B (C - 1)]
    rows = None if valid is None else valid.astype(bool)
    cols = None if valid is None else jnp.tile(rows, c - 1)
    loss = _cross_entropy(scores, rows, cols)
    if symmetric:
        loss = (loss + _cross_entropy(scores[:, :b].T, rows, rows)) / 2
    return loss


def contrastive_loss(emb: jax.Array, scale, *, symmetric: bool = False, dims: Sequence[int] = (),
                     valid=None) -> jax.Array:
    """The loss of one global batch of embeddings [B, C, D] (normalised or not: each prefix is
    re-normalised); dims: Matryoshka prefix sizes (empty: the whole embedding alone); valid [B]."""
    emb = emb.astype(jnp.promote_types(emb.dtype, jnp.float32))
    scale = jnp.asarray(scale, emb.dtype)
    total = jnp.zeros((), emb.dtype)
    for d in (tuple(dims) or (emb.shape[-1],)):
        total = total + info_nce(normalise(emb[..., :d]), scale, symmetric, valid)
    return total
