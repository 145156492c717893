"""The embedding kind's train step: the contrastive loss of one global batch, whole or through GradCache.

A batch holds each column's input_ids / token_type_ids / attention_mask [B, L_c] under
``input_ids_c`` etc. (column 0 the anchor, 1 the positive, 2.. hard negatives; ``by_column`` lays
[B, C, L] arrays out so, each column cut to its own length) and valid [B]. Each column has its own
length, the bucket of its longest text, as sentence-transformers pads each column to its own
longest text: short queries are not padded to the passages' length. ``embedder`` runs the encoder
once per distinct length over the columns of that length, and pools and normalises ([B, C, D]);
``loss_and_grads`` differentiates the contrastive loss (loss.py) over the whole batch, with
``chunks`` > 1 in GradCache's two passes (Gao et al. 2021): every chunk is embedded with no activations kept, the loss and its gradient with respect
to the [B, C, D] embeddings are taken once over the whole batch, then each chunk's forward pass is
run again and that gradient pulled back through it (jax.vjp), the chunks' parameter gradients
summed. Peak memory is one chunk's activations plus the embeddings; the loss and gradients are
the unchunked step's, since every anchor still scores every candidate of the global batch.

On the mesh runner the step is jitted over the global arrays, batch-sharded over 'data': the
[B, B (C - 1)] similarity matrix is taken over the whole global batch by XLA (which gathers the
candidates, gradients and all), so N devices compute what one device computes. ``groups`` (the
data-parallel device count) lays each chunk across the devices, `chunk / groups` rows of every
device's block, so no chunk moves rows between devices.

A learned temperature is the param LOGIT_KEY (log of the scale 1 / temperature) beside the
model's params; a fixed one is a constant.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxbert.engine.step import apply_gradients
from jaxbert.finetune.kinds.embedding.loss import contrastive_loss, normalise, pool

LOGIT_KEY = "embedding_log_scale"
INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def model_params(params: dict) -> dict:
    """The encoder's params (the learned temperature left out)."""
    return {k: v for k, v in params.items() if k != LOGIT_KEY}


def scale_of(params: dict, temperature: float):
    """1 / temperature: exp of the learned log scale where the params hold one."""
    return jnp.exp(params[LOGIT_KEY]) if LOGIT_KEY in params else 1.0 / temperature


def column_key(name: str, column: int) -> str:
    """The batch key of one column's array: input_ids_0 is the anchors' ids."""
    return f"{name}_{column}"


def column_count(batch: dict) -> int:
    """How many columns (anchor, positive, negatives) a batch holds."""
    count = 0
    while column_key(INPUTS[0], count) in batch:
        count += 1
    return count


def by_column(arrays: dict, lengths=None) -> dict:
    """The step's batch from {input_ids, token_type_ids, attention_mask [..., B, C, L], other keys}:
    column c's arrays [..., B, lengths[c]] (all L when lengths is None) under input_ids_c etc.; other
    keys (valid) as they are."""
    count, full = arrays[INPUTS[0]].shape[-2:]
    out = {k: v for k, v in arrays.items() if k not in INPUTS}
    for c in range(count):
        length = full if lengths is None else int(lengths[c])
        for k in INPUTS:
            out[column_key(k, c)] = arrays[k][..., c, :length]
    return out


def embedder(apply_fn: Callable, pooling: str) -> Callable:
    """embed(encoder params, batch (by_column's layout), rng, deterministic) -> unit embeddings [B, C, D]
    (float32): one encoder call per distinct column length, over every column of that length (rows in
    row-major order, as a [B, C', L] array flattened); the k-th call's dropout key is rng folded with k
    (k > 0), so a batch of one length draws what one call on the stacked [B, C, L] arrays draws."""
    def embed(params, batch: dict, rng, deterministic: bool):
        count = column_count(batch)
        groups: dict[int, list[int]] = {}
        for c in range(count):
            groups.setdefault(batch[column_key(INPUTS[0], c)].shape[-1], []).append(c)
        out = [None] * count
        for k, (length, cols) in enumerate(groups.items()):
            flat = [jnp.stack([batch[column_key(name, c)] for c in cols], axis=1).reshape(-1, length)
                    for name in INPUTS]
            key = rng if k == 0 else jax.random.fold_in(rng, k)
            rngs = {} if deterministic else {"dropout": key}
            hidden = apply_fn({"params": params}, *flat, deterministic=deterministic, rngs=rngs).last_hidden_state
            emb = normalise(pool(hidden, flat[2], pooling)).reshape(-1, len(cols), hidden.shape[-1])
            for j, c in enumerate(cols):
                out[c] = emb[:, j]
        return jnp.stack(out, axis=1)
    return embed


def split_rows(x, chunks: int, groups: int = 1):
    """[B, ...] -> [chunks, B / chunks, ...]; chunk j takes B / (chunks groups) rows from each of the
    `groups` contiguous blocks of rows (one block per device)."""
    b = x.shape[0]
    per = b // (chunks * groups)
    y = x.reshape(groups, chunks, per, *x.shape[1:])
    return jnp.swapaxes(y, 0, 1).reshape(chunks, groups * per, *x.shape[1:])


def join_rows(y, groups: int = 1):
    """The inverse of split_rows: [chunks, B / chunks, ...] -> [B, ...]."""
    chunks, m = y.shape[:2]
    z = y.reshape(chunks, groups, m // groups, *y.shape[2:])
    return jnp.swapaxes(z, 0, 1).reshape(chunks * m, *y.shape[2:])


def loss_and_grads(embed: Callable, params: dict, batch: dict, rng, *, temperature: float, symmetric: bool = False,
                   dims=(), chunks: int = 1, groups: int = 1, deterministic: bool = False):
    """(loss, gradients with respect to params) of one global batch; chunks > 1: through GradCache."""
    valid = batch.get("valid")

    def loss_of(emb, log_scale):
        scale = jnp.exp(log_scale) if log_scale is not None else 1.0 / temperature
        return contrastive_loss(emb, scale, symmetric=symmetric, dims=dims, valid=valid)

    log_scale = params.get(LOGIT_KEY)
    enc = model_params(params)
    if chunks <= 1:
        def whole(p):
            return loss_of(embed(model_params(p), batch, rng, deterministic), p.get(LOGIT_KEY))
        return jax.value_and_grad(whole)(params)

    parts = {k: split_rows(v, chunks, groups) for k, v in batch.items() if k != "valid"}

    def chunk_embed(p, part, i):
        return embed(p, part, jax.random.fold_in(rng, i), deterministic)

    index = jnp.arange(chunks)
    # pass 1: embeddings only, no activations kept past each chunk
    embs = jax.lax.map(lambda xs: chunk_embed(jax.lax.stop_gradient(enc), xs[1], xs[0]), (index, parts))
    emb = join_rows(embs, groups)
    if log_scale is None:
        loss, g_emb = jax.value_and_grad(lambda e: loss_of(e, None))(emb)
        g_scale = None
    else:
        loss, (g_emb, g_scale) = jax.value_and_grad(loss_of, argnums=(0, 1))(emb, log_scale)
    g_parts = split_rows(g_emb, chunks, groups)

    # pass 2: each chunk's forward again, its share of dL/d(embeddings) pulled back to the params
    def pull(acc, xs):
        i, part, g = xs
        _, back = jax.vjp(lambda p: chunk_embed(p, part, i), enc)
        return jax.tree_util.tree_map(jnp.add, acc, back(g)[0]), None

    zeros = jax.tree_util.tree_map(jnp.zeros_like, enc)
    grads, _ = jax.lax.scan(pull, zeros, (index, parts, g_parts))
    if g_scale is not None:
        grads = {**grads, LOGIT_KEY: g_scale}
    return loss, grads


def make_train_step(pooling: str, temperature: float, *, symmetric: bool = False, dims=(), chunks: int = 1,
                    groups: int = 1):
    """train_step(state, batch (by_column's layout, arrays [1, B, L_c]), rng) -> (state, metrics) for the
    mesh runner's compile_train: one optimizer update from the loss of the whole global batch (no
    accumulation: a step's negatives are every candidate of its batch; GradCache chunks bound the memory
    instead)."""
    def train_step(state, batch: dict, rng, axis_name: str | None = None):
        if axis_name is not None:
            raise ValueError("the embedding kind trains on the mesh runner (parallel.strategy: mesh), "
                             "where every anchor scores every candidate of the global batch")
        if batch[column_key(INPUTS[0], 0)].shape[0] != 1:
            raise ValueError("the embedding kind takes no train.accum_steps > 1: use "
                             "kinds.embedding.mini_batch_size (GradCache) to bound memory instead")
        mb = jax.tree_util.tree_map(lambda x: x[0], batch)
        loss, grads = loss_and_grads(embedder(state.apply_fn, pooling), state.params, mb,
                                     jax.random.fold_in(rng, state.step), temperature=temperature,
                                     symmetric=symmetric, dims=dims, chunks=chunks, groups=groups)
        first = mb[column_key(INPUTS[0], 0)]
        rows = jnp.sum(mb["valid"].astype(jnp.float32)) if "valid" in mb else jnp.float32(first.shape[0])
        sums = {"loss_sum": loss * rows, "weight": rows}
        return apply_gradients(state, grads, sums, sums["loss_sum"])
    train_step.__name__ = "embedding_train_step"
    return train_step
