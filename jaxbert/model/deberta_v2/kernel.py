"""DeBERTa's disentangled attention in one Pallas kernel: content scores, the c2p / p2c relative terms, the key
mask, the softmax, attention dropout and the context, per (sequence, head), with no [B, N, T, T] array in HBM.

ModelOptions.relative_impl "fused" (and "auto" where the step is compiled for a TPU v5 or later and the padded
length is at most FUSED_MAX_LENGTH) runs it; off a TPU the same kernel runs in Pallas' interpret mode (slow; for
checking it on a CPU). One grid step holds one sequence's whole [T, T] scores for one head in VMEM (T = 512:
1 MiB of float32), so no online softmax is needed and the backward pass recomputes the probabilities from the
inputs alone.

The relative terms as the einsum paths form them (jaxbert.model.deberta_v2.attention), with the table rows taken
once per distance outside the kernel (``pos_key[distance_index]``, [N, W, D], W = 2T: the 2T - 1 distances and a
zero row):

* c2p[i, j] = q_i . pk[j + T - 1 - i]: a block of C = 128 queries is multiplied by the T + C distance rows it
  reaches and the [C, T + C] product skewed by a strided lane rotation (row r rotated right by r - (C - 1));
* p2c[i, j] = k_j . pq[i + T - 1 - j] (pq: the rows in reverse distance order): the same on a block of keys,
  then transposed.

The backward pass needs the skew's transpose, a rotation that shrinks with the row, which Mosaic refuses. With the
keys reversed (block order reversed, each block by a [C, C] anti-identity matmul) the transpose is a rotation that
grows with the row again (``_shift``), against the distance rows in reverse order (c2p) or as read (p2c). The
distance rows' gradients are summed over the batch in VMEM (the grid runs the sequences innermost).

Attention dropout draws its bits from the hash generator of jaxbert.model.dropout as applied to the whole
[B, N, T, T] probabilities, so the kernel drops exactly what the einsum path drops with dropout_impl "hash"
(the fused path is taken only with that generator while dropout is active).

Padding: the key mask is applied (a padded key is attended by no query); padded queries attend every real key
and their outputs are never read. The length is padded to a multiple of 128 with masked keys; the relative rows
depend on i - j alone, so the padded length's skew gives the same terms.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxbert.model.dropout import _C1, _C2, _GOLDEN, keep_threshold
from jaxbert.model.fused import batch_axis
from jaxbert.model.options import ATTENTION_IO

LANES = 128
FUSED_MAX_LENGTH = 512  # "auto" runs the kernel up to this padded length (VMEM: several [T, T] float32 arrays)
VMEM_LIMIT = 64 << 20  # T = 512 compiles within the default 16 MiB too; v5e, v5p and v6e compile with this


def rotates_with_stride(device_kind: str) -> bool:
    """Whether Mosaic compiles the kernel's strided lane rotation for this TPU: from v5 on ("TPU v5 lite",
    "TPU v5", "TPU v6 lite", "TPU7x"); a v4 refuses it."""
    m = re.search(r"tpu\s*v?(\d+)", device_kind.lower())
    return bool(m) and int(m.group(1)) >= 5


def padded_length(T: int) -> int:
    return -(-T // LANES) * LANES


def lanes_of(T: int) -> int:
    """W: the 2T - 1 distances padded to a multiple of the lanes (and at least 2T, so that the backward rotation
    wraps zeros into the lanes no distance reads)."""
    return -(-(2 * T) // LANES) * LANES


def _mix(h):
    """MurmurHash3's fmix32 on int32 words (wrapping multiplies and logical shifts: the uint32 arithmetic of
    jaxbert.model.dropout, written in int32 so that Mosaic lowers it)."""
    shr = lax.shift_right_logical
    h = h ^ shr(h, jnp.int32(16))
    h = h * jnp.int32(np.uint32(_C1).view(np.int32))
    h = h ^ shr(h, jnp.int32(13))
    h = h * jnp.int32(np.uint32(_C2).view(np.int32))
    return h ^ shr(h, jnp.int32(16))


def _keep(words_ref, b, n, T, L, rate):
    """bool [T, T]: hash_keep_mask(key, (B, N, L, L), 1 - rate) at sequence words[2] + b, head n, for the
    queries and keys below L (the unpadded length; the rest is never read). words: the key's two 32-bit words
    and the first sequence's index in the whole batch (a device's rows under the mesh runner), as int32."""
    golden = jnp.int32(np.uint32(_GOLDEN).view(np.int32))
    i = lax.broadcasted_iota(jnp.int32, (T, T), 0)
    j = lax.broadcasted_iota(jnp.int32, (T, T), 1)
    offset = n * jnp.int32(L * L) + i * jnp.int32(L) + j
    h = _mix(offset * golden + words_ref[0])
    h = _mix((h ^ words_ref[1]) + (words_ref[2] + b) * golden)
    # unsigned h < threshold, as a signed compare with both sides' top bit flipped
    flip = jnp.int32(np.uint32(1 << 31).view(np.int32))
    threshold = np.uint32(keep_threshold(1.0 - rate)) ^ np.uint32(1 << 31)
    return (h ^ flip) < jnp.int32(threshold.view(np.int32))


def _dot(a, b, acc, contract=(1, 1)):
    return lax.dot_general(a, b, (((contract[0],), (contract[1],)), ((), ())), preferred_element_type=acc)


def _skew(full, C):
    """[C, V] -> [C, V - C]: out[r, c] = full[r, c + C - 1 - r] (row r rotated right by r - (C - 1), mod V)."""
    V = full.shape[1]
    return pltpu.roll(full, V - C + 1, 1, stride=1, stride_axis=0)[:, :V - C]


def _shift(g, V):
    """[C, T] -> [C, V]: out[r, r + c] = g[r, c], zeros elsewhere (row r rotated right by r). With the keys in
    reverse order this is the skew's transpose: a rotation that grows with the row (Mosaic rotates a vreg's
    rows at most its lanes apart, so the skew's own inverse, a rotation that shrinks with the row, is refused).
    Rotated in float32 at least: Mosaic rotates no packed bfloat16."""
    C, T = g.shape
    dtype = jnp.promote_types(g.dtype, jnp.float32)
    padded = jnp.concatenate([g.astype(dtype), jnp.zeros((C, V - T), dtype)], axis=1)
    return pltpu.roll(padded, 0, 1, stride=1, stride_axis=0)


def _flip(C, dtype):
    """The [C, C] anti-identity: J @ x reverses x's rows, x @ J its columns (one nonzero product per sum)."""
    i = lax.broadcasted_iota(jnp.int32, (C, C), 0)
    j = lax.broadcasted_iota(jnp.int32, (C, C), 1)
    return (i + j == C - 1).astype(dtype)


def _blocks(T):
    """The LANES-row blocks of a padded length: (start, size)."""
    C = min(LANES, T)
    return [(s, C) for s in range(0, T, C)]


def _terms(x_ref, table_ref, T, acc):
    """A relative term's [T, T] rows for the rows of x (queries: c2p; keys: p2c, to be transposed): per block of
    C rows starting at r0, the rows against the T + C distances it reaches (the table's rows T - C - r0 on), then
    skewed. A block reads T + C of the 2T distances where the whole rows would read 2T."""
    out = []
    for r0, C in _blocks(T):
        window = table_ref[pl.ds(T - C - r0, T + C), :]
        out.append(_skew(_dot(x_ref[pl.ds(r0, C), :], window, acc), C))
    return out[0] if len(out) == 1 else jnp.concatenate(out, axis=0)


def _probs(words_ref, q_ref, k_ref, pk_ref, pq_ref, kmask_ref, b, n, *, T, W, L, inv_scale, c2p, p2c, acc):
    s = _dot(q_ref[...], k_ref[...], acc) * inv_scale
    if c2p:  # c2p[i, j] = q_i . pk[j + T - 1 - i]
        s = s + _terms(q_ref, pk_ref, T, acc)
    if p2c:  # p2c[i, j] = k_j . pq[i + T - 1 - j]
        s = s + _terms(k_ref, pq_ref, T, acc).T
    s = jnp.where(kmask_ref[...] > 0, s, jnp.finfo(acc).min)
    e = jnp.exp(s - jnp.max(s, axis=1, keepdims=True))
    return e / jnp.sum(e, axis=1, keepdims=True)


def _forward_kernel(words_ref, q_ref, k_ref, v_ref, pk_ref, pq_ref, kmask_ref, o_ref, *, rate, **kw):
    n, b = pl.program_id(0), pl.program_id(1)
    v = v_ref[...]
    p = _probs(words_ref, q_ref, k_ref, pk_ref, pq_ref, kmask_ref, b, n, **kw)
    if rate > 0:
        p = jnp.where(_keep(words_ref, b, n, kw["T"], kw["L"], rate), p * (1.0 / (1.0 - rate)), 0.0)
    o_ref[...] = _dot(p.astype(v.dtype), v, kw["acc"], (1, 0)).astype(o_ref.dtype)


def _backward_kernel(words_ref, q_ref, k_ref, v_ref, pk_ref, pq_ref, kmask_ref, do_ref, pkr_ref,
                     dq_ref, dk_ref, dv_ref, dpkr_ref, dpq_ref, *, rate, **kw):
    """The gradients of one (sequence, head); the relative rows' gradients summed over the batch (grid axis 1).

    The skew's transpose takes each score gradient dS[i, j] to distance lane j + T - 1 - i. With the keys
    reversed (j' = T - 1 - j: the key blocks in reverse order, each reversed by a [C, C] anti-identity) that
    lane is 2T - 2 - (i + j'): ``_shift`` of dS's rows against the distance rows in reverse (pkr, c2p), and of
    dS^T's rows (the keys, reversed) against the distance rows as the forward pass reads them (p2c), a block
    of C rows at a time against the T + C rows it reaches.
    """
    n, b = pl.program_id(0), pl.program_id(1)
    T, acc, inv_scale = kw["T"], kw["acc"], kw["inv_scale"]
    q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
    p = _probs(words_ref, q_ref, k_ref, pk_ref, pq_ref, kmask_ref, b, n, **kw)
    dp = _dot(do, v, acc)  # [T, T]
    pd = p
    if rate > 0:
        keep = _keep(words_ref, b, n, T, kw["L"], rate)
        pd = jnp.where(keep, p * (1.0 / (1.0 - rate)), 0.0)
        dp = jnp.where(keep, dp * (1.0 / (1.0 - rate)), 0.0)
    dv_ref[...] = _dot(pd.astype(do.dtype), do, acc, (0, 0)).astype(dv_ref.dtype)
    ds = (p * (dp - jnp.sum(p * dp, axis=1, keepdims=True))).astype(q.dtype)  # the scores' gradient [T, T]
    dq = _dot(ds, k, acc, (1, 0)) * inv_scale
    dk = _dot(ds, q, acc, (0, 0)) * inv_scale

    @pl.when(b == 0)
    def _():
        dpkr_ref[...] = jnp.zeros_like(dpkr_ref)
        dpq_ref[...] = jnp.zeros_like(dpq_ref)

    blocks = _blocks(T)
    if kw["c2p"] or kw["p2c"]:
        J = _flip(blocks[0][1], q.dtype)
        # dS with the keys reversed, block by block: exact (one nonzero product per sum)
        ds_r = [_dot(ds[:, T - r0 - C:T - r0], J, acc, (1, 0)) for r0, C in blocks]  # key block j' = r0..r0 + C
    if kw["c2p"]:  # dq_i += sum_j dS[i, j] pk[j + T - 1 - i] = sum_u G[i, u] pkr[u], u = i + j' in i0 .. i0 + T + C
        ds_r_rows = jnp.concatenate(ds_r, axis=1) if len(ds_r) > 1 else ds_r[0]
        parts = []
        for r0, C in blocks:
            g = _shift(ds_r_rows[r0:r0 + C], T + C).astype(q.dtype)
            parts.append(_dot(g, pkr_ref[pl.ds(r0, T + C), :], acc, (1, 0)))
            dpkr_ref[pl.ds(r0, T + C), :] += _dot(g, q[r0:r0 + C], acc, (0, 0))
        dq = dq + (jnp.concatenate(parts, axis=0) if len(parts) > 1 else parts[0])
    if kw["p2c"]:  # dk_j += sum_i dS[i, j] pq[i + T - 1 - j]: rows j' = T - 1 - j, m = i + j' in j0' .. j0' + T + C
        parts = []
        for (r0, C), block in zip(blocks, ds_r):
            g = _shift(block.T, T + C).astype(k.dtype)
            k_r = _dot(J, k[T - r0 - C:T - r0], acc, (1, 0)).astype(k.dtype)  # keys j' = r0 .. r0 + C
            part = _dot(g, pq_ref[pl.ds(r0, T + C), :], acc, (1, 0))  # rows j', flipped back unrounded
            parts.append(lax.dot(_flip(C, acc), part, precision=lax.Precision.HIGHEST, preferred_element_type=acc))
            dpq_ref[pl.ds(r0, T + C), :] += _dot(g, k_r, acc, (0, 0))
        parts = parts[::-1]  # key block j' = r0 holds the keys T - r0 - C .. T - r0
        dk = dk + (jnp.concatenate(parts, axis=0) if len(parts) > 1 else parts[0])
    dq_ref[...] = dq.astype(dq_ref.dtype)
    dk_ref[...] = dk.astype(dk_ref.dtype)


def _specs(T, W, D):
    """Block specs on the grid (head, sequence): the sequence runs innermost, so that a head's distance rows stay
    in VMEM across the batch (fetched once per head) and the backward pass sums their gradients in place."""
    x = pl.BlockSpec((None, None, T, D), lambda n, b, *_: (b, n, 0, 0))
    table = pl.BlockSpec((None, W, D), lambda n, b, *_: (n, 0, 0))
    return x, table, pl.BlockSpec((None, 1, T), lambda n, b, *_: (b, 0, 0))


def _cost(B, N, T, W, D, itemsize, c2p, p2c, backward):
    """The kernel's FLOPs and HBM bytes (XLA counts a Pallas call as unknown without them). Matmuls over or into
    the head dim are counted at no less than the MXU's 128 lanes (64 takes the time of 128)."""
    Dm = max(D, LANES)
    C = min(LANES, T)
    square, rows = 2 * T * T * Dm, 2 * T * (T + C) * Dm  # a [T, T] x D matmul; a term's blocks against T + C rows
    terms = int(c2p) + int(p2c)
    flops = 2 * square + terms * rows  # qk, pv; each term's product
    reads = 3 * B * N * T * D * itemsize + 2 * N * W * D * itemsize
    writes = B * N * T * D * itemsize
    if backward:  # recompute; dp, dv, dq, dk; the key reversal; each term's two (p2c: two block reversals more)
        flops = square + terms * rows + 4 * square + (2 * T * T * C if terms else 0) + terms * 2 * rows
        flops += 2 * 2 * T * C * Dm if p2c else 0
        reads += B * N * T * D * itemsize + N * W * D * itemsize
        writes = 3 * B * N * T * D * itemsize + 2 * N * W * D * 4
    return pl.CostEstimate(flops=int(B * N * flops), transcendentals=int(B * N * T * T),
                           bytes_accessed=int(reads + writes))


def _params(semantics):
    return pltpu.CompilerParams(dimension_semantics=semantics, vmem_limit_bytes=VMEM_LIMIT)


def _statics(q, L, inv_scale, c2p, p2c):
    B, N, T, D = q.shape
    acc = jnp.promote_types(q.dtype, jnp.float32)
    return dict(T=T, W=lanes_of(T), L=int(L), inv_scale=float(inv_scale), c2p=bool(c2p), p2c=bool(p2c), acc=acc)


def _forward_call(words, q, k, v, pk, pq, kmask, *, rate, interpret, **kw):
    B, N, T, D = q.shape
    W = kw["W"]
    x, table, row = _specs(T, W, D)
    return pl.pallas_call(
        functools.partial(_forward_kernel, rate=rate, **kw),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(N, B),
                                               in_specs=[x, x, x, table, table, row], out_specs=x),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=_params(("parallel", "parallel")),
        cost_estimate=_cost(B, N, T, W, D, q.dtype.itemsize, kw["c2p"], kw["p2c"], backward=False),
        interpret=interpret,
    )(words, q, k, v, pk, pq, kmask)


def _backward_call(words, q, k, v, pk, pq, kmask, do, pkr, *, rate, interpret, **kw):
    B, N, T, D = q.shape
    W = kw["W"]
    x, table, row = _specs(T, W, D)
    f32_table = jax.ShapeDtypeStruct((N, W, D), kw["acc"])
    return pl.pallas_call(
        functools.partial(_backward_kernel, rate=rate, **kw),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(N, B),
                                               in_specs=[x, x, x, table, table, row, x, table],
                                               out_specs=[x, x, x, table, table]),
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype)] * 3 + [f32_table] * 2,
        # the tables' gradients are summed over the batch in place: the batch axis runs in order
        compiler_params=_params(("parallel", "arbitrary")),
        cost_estimate=_cost(B, N, T, W, D, q.dtype.itemsize, kw["c2p"], kw["p2c"], backward=True),
        interpret=interpret,
    )(words, q, k, v, pk, pq, kmask, do, pkr)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10, 11, 12))
def _attend(words, q, k, v, pk, pq, kmask, L, inv_scale, c2p, p2c, rate, interpret):
    kw = _statics(q, L, inv_scale, c2p, p2c)
    return _forward_call(words, q, k, v, pk, pq, kmask, rate=rate, interpret=interpret, **kw)


def _attend_fwd(words, q, k, v, pk, pq, kmask, L, inv_scale, c2p, p2c, rate, interpret):
    out = _attend(words, q, k, v, pk, pq, kmask, L, inv_scale, c2p, p2c, rate, interpret)
    return out, (words, q, k, v, pk, pq, kmask)


def _attend_bwd(L, inv_scale, c2p, p2c, rate, interpret, residuals, do):
    words, q, k, v, pk, pq, kmask = residuals
    kw = _statics(q, L, inv_scale, c2p, p2c)
    reverse = lambda t: jnp.concatenate([t[:, 2 * kw["T"] - 2::-1], t[:, 2 * kw["T"] - 1:]], axis=1)
    dq, dk, dv, dpkr, dpq = _backward_call(words, q, k, v, pk, pq, kmask, do.astype(q.dtype), reverse(pk),
                                           rate=rate, interpret=interpret, **kw)
    return (None, dq, dk, dv, reverse(dpkr).astype(pk.dtype), dpq.astype(pq.dtype), None)


_attend.defvjp(_attend_fwd, _attend_bwd)


def hash_words(key) -> jax.Array:
    """int32 [2]: the two words jaxbert.model.dropout.hash_bits draws from a dropout key."""
    return lax.bitcast_convert_type(jax.random.bits(key, (2,), jnp.uint32), jnp.int32)


def disentangled_attention(q, k, v, pos_key, pos_query, key_mask, distances, scale, *, rate: float = 0.0,
                           dropout_key=None):
    """Context [B, T, N, D] of DeBERTa's disentangled attention.

    q, k, v: [B, T, N, D] (the projections, unscaled). pos_key / pos_query: [2 span, N, D] (the projected relative
    embeddings), None for a term the config does not use. key_mask: bool [B, T] (real keys). distances: the
    callable giving int [2T' - 1] table rows per distance for a length T' (distance_index). scale: the terms'
    divisor sqrt(D * scale_factor). rate / dropout_key: attention dropout (hash bits); rate 0 for none.
    """
    B, T, N, D = q.shape
    Tp = padded_length(T)
    W = lanes_of(Tp)
    inv_scale = 1.0 / float(scale)
    heads = lambda x: jnp.pad(jnp.swapaxes(x, 1, 2), ((0, 0), (0, 0), (0, Tp - T), (0, 0)))
    qh, kh, vh = heads(q), heads(k), heads(v)
    dist = distances(Tp) if pos_key is not None or pos_query is not None else None
    rows = lambda table, order: jnp.pad(
        jnp.swapaxes(table[jnp.asarray(order)], 0, 1) * jnp.asarray(inv_scale, table.dtype),
        ((0, 0), (0, W - len(order)), (0, 0))).astype(q.dtype)
    zero = jnp.zeros((N, W, D), q.dtype)
    pk = zero if pos_key is None else rows(pos_key, dist)
    pq = zero if pos_query is None else rows(pos_query, dist[::-1].copy())
    kmask = jnp.pad(key_mask.astype(jnp.int32), ((0, 0), (0, Tp - T)))[:, None, :]
    rate = float(rate) if dropout_key is not None else 0.0
    words = hash_words(dropout_key) if rate > 0 else jnp.zeros((2,), jnp.int32)
    words = jnp.concatenate([words, jnp.zeros((1,), jnp.int32)])
    c2p, p2c = pos_key is not None, pos_query is not None

    def run(words, qh, kh, vh, pk, pq, kmask):
        return jax.lax.platform_dependent(
            words, qh, kh, vh, pk, pq, kmask,
            tpu=lambda *a: _attend(*a, T, inv_scale, c2p, p2c, rate, False),
            default=lambda *a: _attend(*a, T, inv_scale, c2p, p2c, rate, True))

    axis = batch_axis()
    if axis is not None:  # the mesh runner: each device runs its rows (a custom call is not partitioned)
        split, whole = jax.sharding.PartitionSpec(axis), jax.sharding.PartitionSpec()
        local = run

        def run(words, qh, kh, vh, pk, pq, kmask):  # the device's first row's index in the batch
            first = lax.axis_index(axis).astype(jnp.int32) * qh.shape[0]
            return local(words.at[2].set(first), qh, kh, vh, pk, pq, kmask)

        run = jax.shard_map(run, in_specs=(whole, split, split, split, whole, whole, split), out_specs=split,
                            check_vma=False)
    # the kernel's inputs and output named, so that remat_policy "keep_attention" keeps them: the backward pass
    # then runs neither the forward kernel again nor the projections that feed it
    qh, kh, vh = (checkpoint_name(x, ATTENTION_IO) for x in (qh, kh, vh))
    out = checkpoint_name(run(words, qh, kh, vh, pk, pq, kmask), ATTENTION_IO)
    return jnp.swapaxes(out[:, :, :T], 1, 2)


