"""DeBERTa's fused attention kernel (jaxbert.model.deberta_v2.kernel, relative_impl "fused") against the einsum
path it replaces, in float64 in Pallas' interpret mode: the context and the gradients of the queries, keys, values
and both relative tables within 1e-12, with padded keys and attention dropout (the hash generator: the kernel
must drop the very elements the einsum path drops), log buckets and plain clipping, one term alone; a tiny model's
logits and gradients the same on the kernel in training mode (dropout on); the kernel split per device under the mesh
runner, the dropout bits still those of the whole batch; the roofline reads the kernel's declared cost, lowered
and compiled; in bfloat16 within its rounding of float32."""

import re
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert.model.deberta_v2 import attention, build, kernel
from jaxbert.model.dropout import apply_hash_dropout
from jaxbert.model.options import BATCH, compiling_for
from jaxbert.model.softmax import masked_softmax
from jaxbert.plan import hlo_module
from tests.helpers.deberta import padded_ids, relative_terms_case, saved_model
from tests.helpers.runs import child_result

CASES = [  # (position_buckets, max_relative_positions, pos_att_type, T, attention dropout)
    # v3 style, past the buckets' linear range and past max_relative; padded to 256: two blocks of 128
    (8, 16, "p2c|c2p", 150, 0.2),
    (0, 16, "c2p", 33, 0.0),  # v2 style: no buckets, the index clipped past the span; one term; no dropout
]


def _reference(config, q, k, v, pos_key, pos_query, real, scale, rate, key):
    """The einsum path's arithmetic written out: skewed relative bias, masked softmax, hash dropout, context."""
    bias = attention.relative_bias(config, q, k, pos_key, pos_query, scale)
    scores = jnp.einsum("BTND,BSND->BNTS", q, k / scale) + bias
    probs = masked_softmax(scores, real[:, None, None, :])
    if rate:
        probs = apply_hash_dropout(probs, key, rate)
    return jnp.einsum("BNTS,BSND->BTND", probs, v)


def _fused(config, q, k, v, pos_key, pos_query, real, scale, rate, key):
    pos_key = pos_key if "c2p" in config.att_terms else None  # a term the config leaves out: no table
    pos_query = pos_query if "p2c" in config.att_terms else None
    return kernel.disentangled_attention(q, k, v, pos_key, pos_query, real,
                                         lambda length: attention.distance_index(config, length), float(scale),
                                         rate=rate, dropout_key=key if rate else None)


@pytest.mark.parametrize("buckets,max_rel,terms,T,rate", CASES)
def test_the_kernel_equals_the_einsum_path_values_and_gradients(buckets, max_rel, terms, T, rate):
    with jax.enable_x64(True):
        config, rng, scale, pos_key, pos_query = relative_terms_case(buckets, max_rel, terms)
        B, N, D = 2, 2, 4
        q, k, v = (jnp.asarray(rng.normal(size=(B, T, N, D))) for _ in range(3))
        real = jnp.asarray(np.arange(T)[None, :] < np.array([[T], [T - 4]]))  # the second row's last 4 padded
        key = jax.random.key(7)
        weight = jnp.asarray(rng.normal(size=(B, T, N, D))) * real[:, :, None, None]  # padded queries unread

        def run(fn):
            args = (q, k, v, pos_key, pos_query)
            loss = lambda *a: jnp.sum(fn(config, *a, real, scale, rate, key) * weight)
            return fn(config, *args, real, scale, rate, key), jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)

        (want, want_grads), (got, got_grads) = jax.jit(lambda: (run(_reference), run(_fused)))()
        assert got.dtype == jnp.float64 and got.shape == (B, T, N, D)
        rows = np.asarray(real)
        np.testing.assert_allclose(np.asarray(got)[rows], np.asarray(want)[rows], rtol=0, atol=1e-12)
        if rate:  # the dropout is on: without it the context differs by far more than the tolerance
            undropped = _reference(config, q, k, v, pos_key, pos_query, real, scale, 0.0, key)
            assert float(jnp.abs(undropped - want)[rows].max()) > 0.1
        used = {"pos_key": "c2p" in terms, "pos_query": "p2c" in terms}
        for name, g, w in zip(("q", "k", "v", "pos_key", "pos_query"), got_grads, want_grads):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-12, err_msg=name)
            assert (float(jnp.abs(w).max()) > 0.05) == used.get(name, True), name  # reaches what is used


def test_in_bfloat16_the_kernel_stays_within_bfloat16_rounding_of_float32():
    """The dtype a TPU step runs: bfloat16 inputs, float32 accumulation inside the kernel, against the einsum
    path in float32 on the same (rounded) inputs, dropout on: within bfloat16's rounding of the outputs and
    gradients, and no closer to a kernel that drops a term (c2p's table zeroed)."""
    config, rng, scale, pos_key, pos_query = relative_terms_case(8, 16, "p2c|c2p")
    B, T, N, D = 2, 24, 2, 4
    bf = lambda x: jnp.asarray(x, jnp.bfloat16)
    q, k, v = (bf(rng.normal(size=(B, T, N, D))) for _ in range(3))
    tables = (bf(pos_key), bf(pos_query))
    real = jnp.asarray(np.arange(T)[None, :] < np.array([[T], [T - 5]]))
    weight = jnp.asarray(rng.normal(size=(B, T, N, D)), jnp.float32) * real[:, :, None, None]
    key = jax.random.key(2)

    def run(fn, dtype, tables):
        loss = lambda *a: jnp.sum(fn(config, *a, real, scale, 0.1, key).astype(jnp.float32) * weight)
        args = tuple(x.astype(dtype) for x in (q, k, v, *tables))
        return fn(config, *args, real, scale, 0.1, key), jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)

    (want, want_grads), (got, got_grads), (wrong, _) = jax.jit(lambda: (
        run(_reference, jnp.float32, tables), run(_fused, jnp.bfloat16, tables),
        run(_fused, jnp.bfloat16, (jnp.zeros_like(tables[0]), tables[1]))))()
    assert got.dtype == jnp.bfloat16
    rows = np.asarray(real)
    err = lambda a, b: float(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))[rows].max())
    size = float(jnp.abs(want).max())
    assert err(got, want) < 0.02 * size and err(wrong, want) > 0.1 * size, (err(got, want), err(wrong, want), size)
    for name, g, w in zip(("q", "k", "v", "pos_key", "pos_query"), got_grads, want_grads):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert np.abs(g - w).max() < 0.03 * np.abs(w).max(), name


def test_a_model_gives_the_same_logits_and_gradients_on_the_kernel(training=True):
    """The v3-style tiny MLM in float64 end to end, skew against fused, in training mode with its dropout
    (attention 0.1, hash bits) drawn from one key, so both paths drop the same elements."""
    module, params = jaxbert.from_pretrained(saved_model("DebertaV2ForMaskedLM", "v3"))
    assert module.config.attention_probs_dropout_prob > 0
    # its first layer alone: the kernel compiles once per layer in interpret mode, and one layer shows the wiring
    config = module.config.replace(num_hidden_layers=1)
    encoder = dict(params["deberta"]["encoder"], layer={"0": params["deberta"]["encoder"]["layer"]["0"]})
    params = dict(params, deberta=dict(params["deberta"], encoder=encoder))  # the loaded tree left as it is
    ids, mask = padded_ids(40, 30, 3)
    real = np.asarray(mask, bool)
    outs = {}
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda p: jnp.asarray(p, jnp.float64), params)
        weight = jnp.asarray(np.random.RandomState(4).normal(size=(2, 40, config.vocab_size))) * real[..., None]
        for impl in ("skew", "fused"):
            options = module.options.replace(relative_impl=impl, dtype=jnp.float64, param_dtype=jnp.float64,
                                             dropout_impl="hash")
            model = build("DebertaV2ForMaskedLM", config, options)

            def loss(p):
                logits = model.apply({"params": p}, ids, attention_mask=mask, deterministic=not training,
                                     rngs={"dropout": jax.random.key(11)}).logits
                return jnp.sum(logits * weight), logits

            calls = []
            real_kernel = kernel.disentangled_attention
            kernel.disentangled_attention = lambda *a, **kw: calls.append(kw["rate"]) or real_kernel(*a, **kw)
            try:
                outs[impl] = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
            finally:
                kernel.disentangled_attention = real_kernel
            assert calls == ([0.1 if training else 0.0] if impl == "fused" else [])  # one call per layer
    ((value, logits), grads), ((value1, logits1), grads1) = outs["skew"], outs["fused"]
    np.testing.assert_allclose(np.asarray(logits1)[real], np.asarray(logits)[real], rtol=0, atol=1e-10)
    np.testing.assert_allclose(value1, value, rtol=1e-12)
    for g, g1 in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads1)):
        np.testing.assert_allclose(g1, g, rtol=1e-9, atol=1e-11)
    rel = grads1["deberta"]["encoder"]["rel_embeddings"]["embedding"]
    assert float(jnp.abs(rel).max()) > 1e-3  # the relative table is trained through the kernel


MESH = """
import json
import flax.linen as nn, jax, jax.numpy as jnp, numpy as np
from jaxbert.model.options import BATCH
from tests.helpers.deberta import relative_terms_case
from tests.model.test_deberta_kernel import _fused, _reference
config, rng, scale, pos_key, pos_query = relative_terms_case(8, 16, "p2c|c2p")
B, T, N, D = 4, 12, 2, 4
q, k, v = (jnp.asarray(rng.normal(size=(B, T, N, D)), jnp.float32) for _ in range(3))
pos_key, pos_query = (jnp.asarray(x, jnp.float32) for x in (pos_key, pos_query))
real = jnp.asarray(np.arange(T)[None, :] < np.array([[T], [T - 3], [T], [T - 5]]))
weight = jnp.asarray(rng.normal(size=(B, T, N, D)), jnp.float32) * real[:, :, None, None]
key = jax.random.key(5)
def run(fn, *args):
    loss = lambda *a: jnp.sum(fn(config, *a, real, scale, 0.3, key) * weight)
    return fn(config, *args, real, scale, 0.3, key), jax.grad(loss, argnums=(0, 1, 2, 3, 4))(*args)
args = (q, k, v, pos_key, pos_query)
want, want_grads = jax.jit(lambda *a: run(_reference, *a))(*args)
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
with nn.logical_axis_rules(((BATCH, "data"),)), jax.set_mesh(mesh):
    fn = jax.jit(lambda *a: run(_fused, *a))
    text = str(jax.make_jaxpr(fn)(*args))
    got, got_grads = fn(*args)
rows = np.asarray(real)
diffs = [float(np.abs(np.asarray(g) - np.asarray(w)).max()) for g, w in zip(got_grads, want_grads)]
sizes = [float(np.abs(np.asarray(w)).max()) for w in want_grads]
print("RESULT " + json.dumps({"devices": len(jax.devices()), "shard_map": "shard_map" in text,
                               "diff": float(np.abs(np.asarray(got - want))[rows].max()),
                               "size": float(jnp.abs(want).max()), "grad_diffs": diffs, "grad_sizes": sizes}))
"""


def test_under_the_mesh_runner_each_device_runs_its_rows_with_the_whole_batchs_dropout_bits():
    """Two CPU devices, the batch split over them: the kernel runs inside shard_map on each device's rows, and
    its dropout mask is the one the whole batch gets (each device adds its first row's index): equal to the
    einsum path on one device, padded keys and gradients too (the relative tables' summed over both devices)."""
    out = child_result(MESH, devices=2)
    assert out["devices"] == 2 and out["shard_map"]
    assert out["size"] > 0.5 and out["diff"] < 2e-5, out
    for diff, size in zip(out["grad_diffs"], out["grad_sizes"]):
        assert size > 0.05 and diff < 1e-4 * max(size, 1.0), out


def test_auto_runs_the_kernel_for_a_tpu_where_it_can():
    options = jaxbert.model.options.ModelOptions()
    impl = attention.relative_impl
    assert impl(options, 512) == "skew"  # this box's CPU
    assert impl(options.replace(relative_impl="fused"), 512) == "fused"  # asked for: interpreted here
    with compiling_for([types.SimpleNamespace(device_kind="TPU v5 lite")]):
        assert impl(options, 512) == "fused"
        assert impl(options, 513) == "onehot"  # padded to 640: past FUSED_MAX_LENGTH
        assert impl(options, 512, output_attentions=True) == "onehot"  # the probabilities are wanted
        assert impl(options, 512, dropout=True) == "onehot"  # threefry bits: the kernel draws hash bits only
        assert impl(options.replace(dropout_impl="hash"), 512, dropout=True) == "fused"
        assert impl(options, 512, query_mask=True) == "onehot"  # a per-query mask: the kernel takes key masks
        assert impl(options.replace(relative_impl="skew"), 512) == "skew"
    for kind in ("TPU v5", "TPU v6 lite", "TPU7x"):
        with compiling_for([types.SimpleNamespace(device_kind=kind)]):
            assert impl(options, 512) == "fused", kind
    with compiling_for([types.SimpleNamespace(device_kind="TPU v4")]):  # Mosaic's strided rotation is v5+
        assert impl(options, 512) == "onehot"
        with pytest.raises(ValueError, match="relative_impl 'fused': .* TPU v5 or later .*TPU v4"):
            impl(options.replace(relative_impl="fused"), 512)


def test_the_roofline_reads_the_kernels_declared_cost():
    """Lowered for a TPU (Pallas lowers to Mosaic without one), the forward and backward kernels carry their
    pl.CostEstimate, which the planner's roofline adds to the step's FLOPs."""
    config, rng, scale, pos_key, pos_query = relative_terms_case(8, 16, "p2c|c2p")
    B, T, N, D = 2, 128, 2, 64
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, N, D)), jnp.bfloat16) for _ in range(3))
    real = jnp.ones((B, T), bool)
    pos = [jnp.zeros((32, N, D), jnp.bfloat16)] * 2
    loss = lambda q, k, v: jnp.sum(_fused(config, q, k, v, *pos, real, scale, 0.0, None).astype(jnp.float32) ** 2)
    hlo = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, k, v).lower(lowering_platforms=("tpu",)).as_text(
        dialect="hlo")
    calls, flops = hlo_module.kernel_flops(hlo)
    assert calls == 2
    # a compiled step's HLO carries the numbers quoted ("flops":"154618822656"): read the same
    quoted, n = re.subn(r'"(flops|bytes_accessed)":\s*(\d+)', r'"\1":"\2"', hlo)
    assert n >= 4 and hlo_module.kernel_flops(quoted) == (calls, flops)
    C, Dm = 128, 128  # a block of queries or keys reads T + C distance rows; the head dim counted at 128 lanes
    square, rows = 2 * T * T * Dm, 2 * T * (T + C) * Dm
    forward = 2 * square + 2 * rows
    backward = square + 2 * rows + 4 * square + 2 * T * T * C + 4 * rows + 4 * T * C * Dm
    assert flops == B * N * (forward + backward)
