"""Attention that never holds a [B, N, T, T] array: the paths behind attention_impl "blocked", "splash" and "auto".

Both take the queries, keys and values of a self-attention, [B, T, N, D] or heads first [B, N, T, D] (a model
that builds its heads that way saves the transposes; splash then lays them out sequence-minor), a segment id
per token [B, T] (a query attends to the keys of its own segment; ``key_segments`` derives them from the
dense mask a model builds) and, on a sliding layer, the half window w (|query - key| <= w):

* ``blocked`` (any backend; plain jax): a sliding layer cuts the queries into blocks of ``local_block`` and
  scores each block against the keys its window reaches (the block, and w keys either side), so its scores
  are [B, N, T, local_block + 2w]: memory and FLOPs grow as T x window. A block's keys are shifted
  slices of the keys (no gather, whose gradient is a scatter-add). A global layer runs
  ``global_block`` queries at a time against every key, each block recomputed in the backward pass
  (jax.checkpoint inside lax.map): one block's [B, N, global_block, T] scores are held at a time; where its
  whole float32 scores take at most DENSE_SCORES_BYTES, as one block kept for the backward pass.
* ``splash`` (TPU): jax's Pallas splash attention kernel, LocalMask for a window, FullMask for a global
  layer, the segment ids ANDed inside it. Off a TPU the same kernel runs in Pallas' interpret mode (slow; for
  checking it on a CPU). q, k, v go in sequence-minor (LAYOUT), the head dim as it is (64 is not padded
  to the 128 lanes). A layer whose kind is data chooses between the two kernels by lax.cond around the
  kernel call alone (ModernBERT's scanned stack avoids even that: it runs in groups of static kinds, since
  on a TPU a cond copies the kernel's operands into its branches). Under the mesh runner (the batch split over a mesh axis by the logical rule
  BATCH) the kernel runs per device through shard_map, as a custom call cannot be partitioned by XLA.
* ``auto``: splash where the step is lowered for a TPU, blocked elsewhere (jax.lax.platform_dependent:
  the choice is made when lowering, so a step compiled ahead of time for a TPU topology gets the kernel).

Positions the mask excludes (padding) attend only to one another here, where the dense paths let them see
the real keys: their outputs differ and are never read (no real token attends to them).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as splash_mask

from jaxbert.model.options import ATTENTION_IO, BATCH
from jaxbert.model.softmax import softmax_context

Array = jax.Array

FUSED_IMPLS = ("blocked", "splash", "auto")
LANES = 128  # splash's blocks are multiples of the TPU's 128 lanes
GLOBAL_BLOCK = 512  # queries per block of a global layer (blocked path), and splash's block there
# a global layer whose whole float32 scores [B, N, T, T] take at most this runs them as one block, kept for the
# backward pass (blocked path): below it, recomputing blocks costs more time than the memory it saves
DENSE_SCORES_BYTES = 128 << 20
# splash's q, k, v laid out sequence-minor ([.., D, T] in memory): a head dim of 64 then fills 64 sublanes of
# a tile instead of half of its 128 lanes (the head-dim-minor layout pads it to 128 in memory)
LAYOUT = splash.QKVLayout.SEQ_MINOR
PAD_SEGMENT = -1  # segment id of the tokens added to reach a multiple of a block: never a real segment
# segment id of a padding token of an unpacked row (jaxbert.model.layers.attention.layer_mask): as a key no real
# token attends it; as a query of a global layer it attends the row's real tokens (segment 1), as transformers'
# padding mask computes it (a row with no real token: its own padding, every key, as there); on a sliding layer,
# where its window may hold no real token, the padding around it (its output is no real token's input)
PAD_QUERY = -2


def _query_segments(segments: Array) -> Array:
    real = (segments != PAD_QUERY) & (segments != PAD_SEGMENT)
    reads = jnp.where(jnp.any(real, axis=1, keepdims=True), 1, PAD_SEGMENT)
    return jnp.where(segments == PAD_QUERY, reads, segments)


def _key_segments(segments: Array) -> Array:
    return jnp.where(segments == PAD_QUERY, PAD_SEGMENT, segments)


def key_segments(mask: Array, length: int) -> Array:
    """int32 [B, T] segment ids equivalent to a model's bool mask [B, 1, 1 or T, T] (True = attend).

    [B, 1, 1, T] (padding only): 1 for a real token, 0 for padding. [B, 1, T, T] (packed rows: padding &
    same document, documents contiguous runs): a token is real where it may attend to itself, and a new
    document starts where a token may not attend to the one before it; padding gets 0. Only the diagonal
    and the one below it are read, so XLA need not form the dense mask for these paths.
    """
    B = mask.shape[0]
    if mask.shape[-2] == 1:
        return jnp.broadcast_to(mask[:, 0, 0, :], (B, length)).astype(jnp.int32)
    i = jnp.arange(length)
    square = mask[:, 0]
    real = square[:, i, i]
    follows = square[:, i[1:], i[:-1]]  # may token t attend to token t - 1
    starts = jnp.concatenate([jnp.ones((B, 1), bool), ~follows], axis=1)
    return jnp.where(real, jnp.cumsum(starts, axis=1), 0).astype(jnp.int32)


def attend(q: Array, k: Array, v: Array, segments: Array, scale, window, impl: str, is_global=None,
           heads_first: bool = False) -> Array:
    """Context of softmax(q k^T * scale) v over the keys of each query's segment (and window), in the layout
    of q: [B, T, N, D], or [B, N, T, D] with heads_first.

    window: the half window w of a sliding layer, or None (every key). is_global: a traced bool (the scanned
    layer stack) choosing between the two at run time, with window set; None or a Python bool: static.
    impl: one of FUSED_IMPLS.
    """
    if not heads_first:
        q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
    if isinstance(is_global, bool):
        window = None if is_global else window
        is_global = None
    fn = {"blocked": blocked_attention, "splash": splash_attention, "auto": auto_attention}[impl]
    out = fn(q, k, v, segments, scale, window, is_global)
    return out if heads_first else jnp.swapaxes(out, 1, 2)


def auto_attention(q, k, v, segments, scale, window, is_global=None):
    """splash when lowered for a TPU, blocked otherwise."""
    return jax.lax.platform_dependent(
        q, k, v, segments,
        tpu=lambda *a: splash_attention(*a, scale, window, is_global),
        default=lambda *a: blocked_attention(*a, scale, window, is_global))


def _by_kind(is_global, window, run, *args):
    """run(*args, window), or with is_global traced: lax.cond between run(*args, None) and run(*args, window)."""
    if is_global is None or window is None:
        return run(*args, window)
    return jax.lax.cond(is_global, lambda *a: run(*a, None), lambda *a: run(*a, window), *args)


# -- blocked: plain jax ------------------------------------------------------------------------------


def local_block(window: int) -> int:
    """Queries per block of a sliding layer: the half window (at least 16), so a block's keys, the block
    and w either side, are 3 w: about 1.5x the 2 w + 1 the window keeps."""
    return max(16, int(window))


def blocked_attention(q, k, v, segments, scale, window, is_global=None):
    """q, k, v [B, N, T, D] -> [B, N, T, D]; inputs and output named ATTENTION_IO, as splash's are."""
    def run(q, k, v, segments, window):
        if window is None:
            return _global_blocks(q, k, v, segments, scale)
        return _local_blocks(q, k, v, segments, scale, int(window))
    q, k, v = (checkpoint_name(x, ATTENTION_IO) for x in (q, k, v))
    return checkpoint_name(_by_kind(is_global, window, run, q, k, v, segments), ATTENTION_IO)


def _pad_to(x: Array, axis: int, before: int, after: int, value=0) -> Array:
    if before == 0 and after == 0:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (before, after)
    return jnp.pad(x, pads, constant_values=value)


def _local_blocks(q, k, v, segments, scale, w):
    B, N, T, D = q.shape
    C = local_block(w)
    r = -(-w // C)  # key blocks either side that the window reaches (C >= w, so 1)
    n = -(-T // C)
    Tp = n * C
    qb = _pad_to(q, 2, 0, Tp - T).reshape(B, N, n, C, D)
    segments = _key_segments(segments)
    sq = _pad_to(segments, 1, 0, Tp - T, PAD_SEGMENT).reshape(B, n, C)

    def reach(x, axis, value=0):
        """x cut into the n blocks of C along `axis`, each joined by the r blocks either side of it
        (zeros / `value` past the ends): [.., n, (2r + 1) C, ..] from 2r + 1 shifted slices, no gather."""
        x = _pad_to(x, axis, r * C, Tp - T + r * C, value)
        blocks = x.reshape(x.shape[:axis] + (n + 2 * r, C) + x.shape[axis + 1:])
        return jnp.concatenate([jax.lax.slice_in_dim(blocks, i, i + n, axis=axis) for i in range(2 * r + 1)],
                               axis=axis + 1)

    kb, vb = reach(k, 2), reach(v, 2)  # [B, N, n, (2r + 1) C, D]
    skb = reach(segments, 1, PAD_QUERY)  # never equal to any query's segment (_query_segments)
    # query i of a block sits at key offset i + r C of its keys: the window is |i + r C - j| <= w
    near = np.abs(np.arange(C)[:, None] + r * C - np.arange((2 * r + 1) * C)[None, :]) <= w
    mask = (sq[:, :, :, None] == skb[:, :, None, :]) & near  # [B, n, C, (2r + 1) C]
    scores = jnp.einsum("BNnqD,BNnkD->BNnqk", qb, kb) * scale
    out = softmax_context(scores, mask[:, None], vb).reshape(B, N, Tp, D)
    return out[:, :, :T]


def _global_blocks(q, k, v, segments, scale):
    B, N, T, D = q.shape
    queries, segments = _query_segments(segments), _key_segments(segments)

    def block(args):
        qc, sc = args
        scores = jnp.einsum("BNqD,BNkD->BNqk", qc, k) * scale
        return softmax_context(scores, (sc[:, :, None] == segments[:, None, :])[:, None], v)

    if B * N * T * T * 4 <= DENSE_SCORES_BYTES:
        return block((q, queries))
    C = min(GLOBAL_BLOCK, T)
    n = -(-T // C)
    Tp = n * C
    qb = jnp.moveaxis(_pad_to(q, 2, 0, Tp - T).reshape(B, N, n, C, D), 2, 0)
    sq = jnp.moveaxis(_pad_to(queries, 1, 0, Tp - T, PAD_SEGMENT).reshape(B, n, C), 1, 0)

    out = jax.lax.map(jax.checkpoint(block), (qb, sq))  # one block at a time, forward and backward: [n, B, N, C, D]
    return jnp.moveaxis(out, 0, 2).reshape(B, N, Tp, D)[:, :, :T]


# -- splash: Pallas on TPU ---------------------------------------------------------------------------


def splash_geometry(T: int, window) -> tuple[int, int]:
    """(padded length, block) of a splash call: blocks of 128 on sliding layers (a larger block
    skips fewer keys outside a +-64 window), up to GLOBAL_BLOCK on global ones; the length padded to a
    multiple of 128 (so both kinds of a scanned stack take one padded length). The head dim is passed as it
    is: the kernel takes a head dim below the 128 lanes (64 is ModernBERT's and BERT-base's)."""
    Tp = -(-T // LANES) * LANES
    block = LANES
    if window is None:
        block = max(b for b in (LANES, 256, GLOBAL_BLOCK) if Tp % b == 0)
    return Tp, block


@functools.lru_cache(maxsize=64)
def splash_kernel(T: int, heads: int, window, block: int, interpret: bool):
    """The splash kernel for a [heads, T, D] call: a LocalMask |q - k| <= window, or a FullMask."""
    one = (splash_mask.FullMask((T, T)) if window is None
           else splash_mask.LocalMask((T, T), window_size=(int(window), int(window)), offset=0))
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                              block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block,
                              block_kv_dq=block, q_layout=LAYOUT, k_layout=LAYOUT, v_layout=LAYOUT)
    # Cached across traces: its mask tables must be concrete arrays, not values of the trace that built it.
    with jax.ensure_compile_time_eval():
        return splash.make_splash_mha(splash_mask.MultiHeadMask([one] * heads), block_sizes=sizes,
                                      head_shards=1, q_seq_shards=1, interpret=interpret,
                                      residual_checkpoint_name=ATTENTION_IO)


def splash_attention(q, k, v, segments, scale, window, is_global=None):
    """The kernel where lowered for a TPU, its interpreted form elsewhere. q, k, v [B, N, T, D]."""
    return jax.lax.platform_dependent(
        q, k, v, segments,
        tpu=lambda *a: _splash(*a, scale, window, interpret=False, is_global=is_global),
        default=lambda *a: _splash(*a, scale, window, interpret=True, is_global=is_global))


def _splash(q, k, v, segments, scale, window, interpret, is_global=None):
    B, N, T, D = q.shape
    Tp = splash_geometry(T, window)[0]
    # the kernel applies no softmax scale: scale q first (in the compute dtype, as the einsum path scales)
    prep = lambda x: _pad_to(x, 2, 0, Tp - T)  # [B, N, Tp, D]
    qh, kh, vh = prep(q * jnp.asarray(scale, q.dtype)), prep(k), prep(v)
    # named as the kernel's inputs, so a remat policy may keep them (remat_policy "keep_attention"), in the
    # kernel's own layout [B, N, D, Tp]: a scanned stack saves them in a buffer of the named array's default
    # layout, and named [B, N, Tp, D] they were transposed into it and out again for the backward kernels
    qh, kh, vh = (jnp.swapaxes(checkpoint_name(jnp.swapaxes(x, -1, -2), ATTENTION_IO), -1, -2)
                  for x in (qh, kh, vh))
    # every query needs one key it may attend to: the added tokens form a segment of their own
    seg = _pad_to(segments, 1, 0, Tp - T, PAD_SEGMENT)

    def run(qh, kh, vh, seg, window):
        kernel = splash_kernel(Tp, N, window, splash_geometry(T, window)[1], interpret)
        keys = _key_segments(seg)
        queries = _query_segments(seg) if window is None else keys  # PAD_QUERY: a global layer's padding
        return jax.vmap(lambda a, b, c, s, t: kernel(a, b, c, segment_ids=splash.SegmentIds(q=s, kv=t)))(
            qh, kh, vh, queries, keys)

    def on_devices(qh, kh, vh, seg):
        return _by_kind(is_global, window, run, qh, kh, vh, seg)

    axis = batch_axis()
    if axis is not None:  # the mesh runner: each device runs its rows
        spec = jax.sharding.PartitionSpec(axis)
        if is_global is not None and window is not None:
            # the layer's kind goes in as data, whole on every device
            call = lambda qh, kh, vh, seg, g: _by_kind(g, window, run, qh, kh, vh, seg)
            mapped = jax.shard_map(call, in_specs=(spec,) * 4 + (jax.sharding.PartitionSpec(),), out_specs=spec,
                                   check_vma=False)
            return mapped(qh, kh, vh, seg, is_global)[:, :, :T]
        on_devices = jax.shard_map(on_devices, in_specs=(spec,) * 4, out_specs=spec, check_vma=False)
    return on_devices(qh, kh, vh, seg)[:, :, :T]


def batch_axis():
    """The mesh axis the active logical rules split the batch over (jaxbert.engine.parallel.MeshRunner),
    where a mesh is active; else None."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty:
        return None
    axis = nn.logical_to_mesh_axes((BATCH,))[0]
    return axis if axis in mesh.axis_names else None
