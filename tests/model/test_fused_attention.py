"""attention_impl blocked / splash / auto (jaxbert.model.fused) against a dense masked softmax and against the
einsum path: values and gradients, sliding windows and global layers, packed documents, padding, lengths
that are no multiple of a block. The TPU kernel (splash) runs in Pallas' interpret mode here. Each fault
that would pass unnoticed elsewhere (a window off by one, no segment mask, q left unscaled) fails a test
named for it. Then the roofline counts each kernel of a step lowered for a TPU (no libtpu: lowering only)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from jaxbert.model import fused
from jaxbert.model.classes import build_model
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.modernbert import build
from jaxbert.model.options import BATCH, ModelOptions
from jaxbert.model.softmax import masked_softmax
from jaxbert.plan import hlo_module, roofline
from tests.helpers.modernbert import config_of, params_of, tiny_hf

B, T, N, D, W = 2, 150, 2, 8, 16  # T: no multiple of splash's 128 nor of the local block (16)
SCALE = D ** -0.5


def _segments():
    """Row 0: documents of 70 and 60 tokens, then 20 of padding; row 1: one document, 30 of padding."""
    s = np.zeros((B, T), np.int32)
    s[0, :70], s[0, 70:130], s[1, :120] = 1, 2, 1
    return jnp.asarray(s)


def dense(q, k, v, segments, scale, window):
    """The reference: every score formed, masked to the segment (and window), softmax, weighted values."""
    scores = jnp.einsum("BTND,BSND->BNTS", q, k) * scale
    allowed = segments[:, :, None] == segments[:, None, :]
    if window is not None:
        i = jnp.arange(q.shape[1])
        allowed = allowed & (jnp.abs(i[:, None] - i[None, :]) <= window)
    return jnp.einsum("BNTS,BSND->BTND", masked_softmax(scores, allowed[:, None]), v)


def _qkv(seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=(B, T, N, D)), jnp.float32) for _ in range(3))


def _value_and_grads(fn, q, k, v, weights):
    """fn's output, and the gradients of sum(output * weights) (weights zero at padding) in q, k and v."""
    def both(q, k, v):
        out, pullback = jax.vjp(fn, q, k, v)
        return out, pullback(weights.astype(out.dtype))
    return jax.jit(both)(q, k, v)


@pytest.fixture(scope="module")
def runs():
    """For each path and window: (output, grads), computed once for the tests below."""
    q, k, v = _qkv()
    segments = _segments()
    weights = jnp.asarray(np.random.default_rng(1).normal(size=(B, T, N, D))) * (segments > 0)[..., None, None]
    out = {}
    for impl in ("blocked", "splash"):
        for window in (None, W):
            out[impl, window] = _value_and_grads(
                lambda q, k, v, impl=impl, window=window: fused.attend(q, k, v, segments, SCALE, window, impl),
                q, k, v, weights)
    return (q, k, v), segments, weights, out


def _real(x, segments):
    return np.asarray(x)[np.asarray(segments) > 0]


@pytest.mark.parametrize("impl", ["blocked", "splash"])
@pytest.mark.parametrize("window", [None, W], ids=["global", "window"])
def test_values_and_gradients_equal_the_dense_softmax(runs, impl, window):
    (q, k, v), segments, weights, out = runs
    want, want_grads = _value_and_grads(lambda q, k, v: dense(q, k, v, segments, SCALE, window), q, k, v, weights)
    got, grads = out[impl, window]
    np.testing.assert_allclose(_real(got, segments), _real(want, segments), atol=2e-6, rtol=0)
    for g, w, name in zip(grads, want_grads, "qkv"):
        np.testing.assert_allclose(g, w, atol=5e-6, rtol=0, err_msg=f"d{name}")
    assert float(jnp.abs(want_grads[1]).max()) > 1e-2  # the gradients carry signal


def _far(a, b, segments):
    return float(np.abs(_real(a, segments) - _real(b, segments)).max())


@pytest.mark.parametrize("impl", ["blocked", "splash"])
def test_a_window_off_by_one_fails(runs, impl):
    """The key exactly W away counts, the one W + 1 away does not: W - 1 or W + 1 would be off by > 1e-3."""
    (q, k, v), segments, _, out = runs
    got = out[impl, W][0]
    for wrong in (W - 1, W + 1):
        assert _far(got, dense(q, k, v, segments, SCALE, wrong), segments) > 1e-3
    assert _far(got, dense(q, k, v, segments, SCALE, W), segments) < 2e-6


@pytest.mark.parametrize("impl", ["blocked", "splash"])
@pytest.mark.parametrize("window", [None, W], ids=["global", "window"])
def test_a_missing_segment_mask_fails(runs, impl, window):
    """Packed documents stay apart: attending across the boundary (or to padding) would move the outputs."""
    (q, k, v), segments, _, out = runs
    got = out[impl, window][0]
    unsegmented = dense(q, k, v, (segments > 0).astype(jnp.int32), SCALE, window)  # padding masked, documents not
    assert _far(got, unsegmented, segments) > 1e-3
    everything = dense(q, k, v, jnp.ones_like(segments), SCALE, window)  # padding not masked either
    assert float(np.abs(np.asarray(got)[1, :120] - np.asarray(everything)[1, :120]).max()) > 1e-3


@pytest.mark.parametrize("impl", ["blocked", "splash"])
def test_an_unscaled_q_fails(runs, impl):
    """The softmax scale is applied once (splash's kernel applies none: q is scaled before it)."""
    (q, k, v), segments, _, out = runs
    for window in (None, W):
        got = out[impl, window][0]
        for wrong in (1.0, SCALE ** 2):
            assert _far(got, dense(q, k, v, segments, wrong, window), segments) > 1e-3


def test_key_segments_reads_padding_and_documents_from_the_dense_mask():
    segments = np.array([[1, 1, 2, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 0]], np.int32)
    valid = segments > 0
    packed = valid[:, None, None, :] & (segments[:, :, None] == segments[:, None, :])[:, None]
    ids = np.asarray(fused.key_segments(jnp.asarray(packed), 8))
    np.testing.assert_array_equal(ids, segments)  # runs renumbered from 1, padding 0
    np.testing.assert_array_equal(np.asarray(fused.key_segments(jnp.asarray(valid[:, None, None, :]), 8)),
                                  valid.astype(np.int32))


# -- whole models against their einsum path ----------------------------------------------------------------

NAME = "ModernBertForMaskedLM"
MB_T = 40  # > the window (+-4) and > two local blocks (16); packed: 17 + 15 tokens and 8 of padding


@pytest.fixture(scope="module")
def modernbert():
    hf = tiny_hf(NAME, seed=5)
    rng = np.random.default_rng(3)
    ids = rng.integers(3, 100, (2, MB_T)).astype(np.int32)
    segments = np.zeros((2, MB_T), np.int32)
    segments[0, :17], segments[0, 17:32], segments[1, :35] = 1, 2, 1
    ids[segments == 0] = 0
    return hf, ids, segments


def _mb_run(hf, ids, segments, options):
    """Logits, and the gradient of a weighted sum of them (real positions only) in a sliding layer's Wqkv."""
    module = build(NAME, config_of(hf), options)
    params = params_of(hf, NAME, options.scan_layers)
    weights = jnp.asarray(np.random.default_rng(4).normal(size=ids.shape + (100,)), jnp.float32)
    weights = weights * (segments > 0)[..., None]

    def logits(p):
        return module.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(segments > 0, jnp.int32),
                            segment_ids=jnp.asarray(segments)).logits

    def both(p):
        out, pullback = jax.vjp(logits, p)
        return out, pullback(weights)[0]
    out, grads = jax.jit(both)(params)
    layers = grads["model"]["layers"]
    wqkv = layers["scan"]["attn"]["Wqkv"]["kernel"][0] if options.scan_layers else layers["1"]["attn"]["Wqkv"]["kernel"]
    return np.asarray(out), np.asarray(wqkv)  # layer 1: a sliding one


_EINSUM = {}


@pytest.mark.parametrize("options", [ModelOptions(attention_impl="blocked"),
                                     ModelOptions(attention_impl="auto", scan_layers=True, remat_policy="full"),
                                     ModelOptions(attention_impl="splash")],
                         ids=["blocked", "auto-scan-remat", "splash"])
def test_modernbert_logits_and_gradients_equal_einsum(modernbert, options):
    hf, ids, segments = modernbert
    scan = options.scan_layers
    if scan not in _EINSUM:
        _EINSUM[scan] = _mb_run(hf, ids, segments, ModelOptions(scan_layers=scan))
    want, want_grad = _EINSUM[scan]
    got, grad = _mb_run(hf, ids, segments, options)
    real = segments > 0
    np.testing.assert_allclose(got[real], want[real], atol=3e-5, rtol=0)
    np.testing.assert_allclose(grad, want_grad, atol=2e-5 * float(np.abs(want_grad).max()), rtol=0)


@pytest.mark.parametrize("kind", [None, "TPU v5 lite"])
@pytest.mark.parametrize("impl", ["blocked", "splash"])
def test_modernbert_fused_wqkv_gradients_with_biases_equal_einsum(impl, kind):
    """The fused path's Wqkv has its own lowerings (rows on a CPU, rotary_qkv's written-out backward for a
    TPU v5e, by compiling_for): with attention biases on, the gradients of Wqkv's kernel and bias in a global
    and a sliding layer, and of the token embeddings (what flows back out of the projection), equal the
    einsum path's, which autodiff derives."""
    from types import SimpleNamespace

    from jaxbert.model.options import compiling_for
    hf = tiny_hf(NAME, seed=6, attention_bias=True)
    rng = np.random.default_rng(8)
    ids = jnp.asarray(rng.integers(3, 100, (2, MB_T)), jnp.int32)
    mask = jnp.asarray(np.arange(MB_T)[None] < np.array([[MB_T], [29]]), jnp.int32)
    weights = jnp.asarray(rng.normal(size=(2, MB_T, 100)), jnp.float32) * mask[..., None]
    params = params_of(hf, NAME)

    def grads(options):
        module = build(NAME, config_of(hf), options)
        loss = lambda p: jnp.sum(module.apply({"params": p}, ids, attention_mask=mask).logits * weights)
        g = jax.jit(jax.grad(loss))(params)
        attn = [g["model"]["layers"][str(i)]["attn"]["Wqkv"] for i in (0, 1)]  # global, sliding
        return [np.asarray(a[n]) for a in attn for n in ("kernel", "bias")] + [
            np.asarray(g["model"]["embeddings"]["tok_embeddings"]["embedding"])]

    with compiling_for([SimpleNamespace(device_kind=kind)] if kind else []):
        fused_grads = grads(ModelOptions(attention_impl=impl))
    for got, want, name in zip(fused_grads, grads(ModelOptions()),
                               ["global kernel", "global bias", "sliding kernel", "sliding bias", "embeddings"]):
        scale = float(np.abs(want).max())
        assert scale > 1e-3, name  # carries signal
        np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=0, err_msg=name)


BERT = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                  max_position_embeddings=64)


@pytest.mark.parametrize("impl", ["blocked", "splash"])
def test_bert_full_attention_equals_einsum_and_falls_back_where_it_must(impl):
    rng = np.random.default_rng(7)
    ids = jnp.asarray(rng.integers(3, 99, (2, 20)), jnp.int32)
    mask = jnp.asarray(np.arange(20)[None] < np.array([[20], [13]]), jnp.int32)
    segments = jnp.asarray(np.where(np.arange(20) < 8, 1, 2)[None] * mask)
    ref = build_model("BertForMaskedLM", BERT)
    params = ref.init(jax.random.PRNGKey(0), ids)["params"]
    model = build_model("BertForMaskedLM", BERT, ModelOptions(attention_impl=impl))
    real = np.asarray(mask, bool)
    runs = [jax.jit(lambda p, s, m=m: m.apply({"params": p}, ids, attention_mask=mask, segment_ids=s).logits)
            for m in (model, ref)]
    for s in (None, segments):
        got, want = (np.asarray(run(params, s)) for run in runs)
        np.testing.assert_allclose(got[real], want[real], atol=2e-5, rtol=0)
    # probabilities asked for, or a head mask: the einsum path, which returns them
    out = model.apply({"params": params}, ids, attention_mask=mask, output_attentions=True,
                      head_mask=jnp.array([1.0, 0.0, 1.0, 1.0]))
    assert out.attentions[0].shape == (2, 4, 20, 20)
    np.testing.assert_array_equal(np.asarray(out.attentions[0][:, 1]), 0.0)


def test_under_the_mesh_runner_the_kernel_runs_per_device_through_shard_map():
    """With the batch split over a mesh axis (the runner's logical rule), splash is wrapped in shard_map with
    that axis on the batch of q, k, v and segment ids: a custom call is never handed to GSPMD whole."""
    q, k, v = (jnp.swapaxes(x, 1, 2) for x in _qkv())  # the kernel's layout, heads first
    mesh = jax.sharding.AbstractMesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    with nn.logical_axis_rules(((BATCH, "data"),)), jax.sharding.use_abstract_mesh(mesh):
        jaxpr = jax.make_jaxpr(lambda q, k, v: fused._splash(q, k, v, _segments(), SCALE, W, interpret=True))(q, k, v)
    maps = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "shard_map"]
    assert len(maps) == 1
    # q, k, v and the segment ids split by rows; the kernel's mask tables (closed over) whole on each device
    specs = [tuple(spec) for spec in maps[0].params["in_specs"]]
    split = [(var.aval.shape, spec) for var, spec in zip(maps[0].invars, specs) if spec]
    # the length padded to a multiple of 128; the head dim (8) as it is
    assert sorted(split) == sorted([((B, N, 256, D), ("data",))] * 3 + [((B, 256), ("data",))])
    assert all(spec in ((), (None,) * len(spec)) for spec in specs if spec != ("data",))
    outside = jax.make_jaxpr(lambda q, k, v: fused._splash(q, k, v, _segments(), SCALE, W, interpret=True))(q, k, v)
    assert not any(e.primitive.name == "shard_map" for e in outside.jaxpr.eqns)


# -- the roofline counts the kernels -----------------------------------------------------------------------


def _tpu_hlo(fn, *args) -> str:
    """fn's HLO lowered for a TPU (no TPU or libtpu needed: Pallas lowers its kernels to Mosaic itself)."""
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo", debug_info=True)


def _kernels(hlo: str) -> list:
    module = hlo_module.HloModule(hlo)
    return [op for op in module.operations() if op.opcode == "custom-call" and "splash" in op.source]


@pytest.mark.parametrize("window", [None, 64], ids=["global", "window"])
def test_roofline_counts_each_splash_kernel_from_the_blocks_it_visits(window):
    """3 sequences of T = 512, 2 heads of 64 (not padded to the 128 lanes). Global: one 512 block, 1 pair per head; window +-64 in
    blocks of 128: each of 4 query blocks reaches 3 key blocks (12 steps). Per step and score element:
    2 matmuls forward, 3 in the dq kernel, 4 in the dkv kernel, each counted at 2 x 128 FLOPs (the MXU's
    128 lanes: a head dim of 64 takes the time of 128)."""
    H, L, rows = 2, 512, 3  # 3 sequences: the kernel is vmapped over them, and its grid takes them in
    x = jnp.zeros((rows, H, L, 64), jnp.float32)  # heads first, the kernel's layout
    seg = jnp.ones((rows, L), jnp.int32)
    loss = lambda q, k, v: fused._splash(q, k, v, seg, 0.125, window, interpret=False).sum()
    hlo = _tpu_hlo(jax.grad(loss, argnums=(0, 1, 2)), x, x, x)
    kernels = _kernels(hlo)
    assert sorted(op.source.split("/")[0].split("_")[2] for op in kernels) == ["dkv", "dq", "fwd"]
    block, steps = (512, 1) if window is None else (128, 12)
    per_matmul = 2.0 * rows * H * steps * block * block * 128
    want = {"fwd": 2 * per_matmul, "dq": 3 * per_matmul, "dkv": 4 * per_matmul}
    for op in kernels:
        assert op.flops == want[op.source.split("/")[0].split("_")[2]] > 0
        assert op.bytes > 0
    bound = roofline.step_bound(hlo, 197e12, 819e9)
    assert bound.flops >= sum(want.values())
    # what jaxbert.plan.compile_step adds to XLA's FLOPs (which count each kernel as -1)
    assert hlo_module.kernel_flops(hlo) == (3, sum(want.values()))


def test_roofline_reads_a_declared_cost_estimate():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def fn(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              cost_estimate=pl.CostEstimate(flops=12345, transcendentals=0, bytes_accessed=67890))(x)

    module = hlo_module.HloModule(_tpu_hlo(fn, jnp.zeros((8, 128), jnp.float32)))
    ops = [op for op in module.operations() if op.opcode == "custom-call"]
    assert [(op.flops, op.bytes) for op in ops] == [(12345.0, 67890.0)]


def test_no_kernel_of_a_modernbert_train_step_lowered_for_tpu_counts_zero():
    """auto on a TPU: every kernel of a tiny ModernBERT's forward and backward has FLOPs > 0, and the step's
    counted FLOPs exceed its dense matmuls'."""
    hf = tiny_hf(NAME, seed=5)
    module = build(NAME, config_of(hf), ModelOptions(attention_impl="auto", scan_layers=True))
    params = params_of(hf, NAME, True)
    ids = jnp.ones((2, 256), jnp.int32)
    hlo = _tpu_hlo(jax.grad(lambda p: module.apply({"params": p}, ids).logits.sum()), params)
    kernels = _kernels(hlo)
    assert len(kernels) >= 6  # fwd, dq, dkv of the global kernel and of the sliding one
    assert all(op.flops > 0 and op.bytes > 0 for op in kernels)


@pytest.mark.parametrize("impl", ["blocked", "splash"])
def test_remat_keep_attention_keeps_the_kernel_inputs_and_gives_fulls_gradients(impl):
    """remat_policy keep_attention: the same gradients as full (and as no remat), and the scanned step's
    backward pass runs the forward kernel no more (splash) / recomputes fewer matmuls (blocked: Wqkv's outputs
    are kept; its scores are still recomputed)."""
    hf = tiny_hf(NAME, seed=3)
    params = params_of(hf, NAME, True)
    ids = jnp.asarray(np.random.default_rng(0).integers(5, 90, size=(2, 160)), jnp.int32)
    mask = jnp.asarray(np.arange(160)[None] < np.array([[160], [101]]), jnp.int32)

    def grads(policy):
        module = build(NAME, config_of(hf), ModelOptions(attention_impl=impl, scan_layers=True, remat_policy=policy))
        grad = jax.grad(lambda p: (module.apply({"params": p}, ids, attention_mask=mask).logits ** 2).mean())
        if impl == "splash":  # what runs on a TPU: the kernels as custom calls
            return jax.jit(grad)(params), _kernels(_tpu_hlo(grad, params))
        return jax.jit(grad)(params), jax.jit(grad).lower(params).as_text()

    (full, full_ops), (kept, kept_ops), (plain, _) = grads("full"), grads("keep_attention"), grads("none")
    for a, b, c in zip(jax.tree.leaves(kept), jax.tree.leaves(full), jax.tree.leaves(plain)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), atol=1e-6, rtol=1e-5)
    if impl == "splash":  # the forward kernels (global, sliding): in the forward pass, not again in the backward
        forward = lambda ops: sum("splash_mha_fwd" in op.source for op in ops)
        assert forward(kept_ops) < forward(full_ops)
        assert len(kept_ops) == len(full_ops) - (forward(full_ops) - forward(kept_ops))
    else:  # fewer matmuls: the attention's inputs (after Wqkv) and output are not recomputed
        assert kept_ops.count("dot_general") < full_ops.count("dot_general")


def test_a_scanned_stack_of_repeating_kinds_runs_in_groups_without_a_cond_and_computes_the_same():
    """7 layers, global every 2nd: the scanned layers 1..6 are (sliding, global) x 3. On a fused path they run as 3
    groups of 2 layers of static kinds (no lax.cond choosing the attention by data), from the same params
    (layers/scan, leaves [6, ..]); logits and gradients equal the einsum path's, and init is the per-layer scan's.
    With biases on (Wqkv's is read through the heads-first view)."""
    hf = tiny_hf(NAME, seed=3, num_hidden_layers=7, attention_bias=True, mlp_bias=True)
    cfg = config_of(hf)
    params = params_of(hf, NAME, True)
    ids = jnp.asarray(np.random.default_rng(0).integers(5, 90, size=(2, 96)), jnp.int32)
    mask = jnp.asarray(np.arange(96)[None] < np.array([[96], [61]]), jnp.int32)
    real = np.asarray(mask, bool)
    runs = {}
    for impl in ("einsum", "blocked"):
        module = build(NAME, cfg, ModelOptions(attention_impl=impl, scan_layers=True, remat_policy="full"))
        logits = lambda p, module=module: module.apply({"params": p}, ids, attention_mask=mask).logits
        grads = jax.grad(lambda p: (jnp.where(mask[..., None] > 0, logits(p), 0.0) ** 2).mean())(params)
        runs[impl] = np.asarray(logits(params))[real], grads, jax.make_jaxpr(logits)(params), module
    np.testing.assert_allclose(runs["blocked"][0], runs["einsum"][0], atol=2e-5, rtol=0)
    for a, b in zip(jax.tree.leaves(runs["blocked"][1]), jax.tree.leaves(runs["einsum"][1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=1e-4)
    assert "cond[" not in str(runs["blocked"][2])  # grouped: every layer's kind static
    # each layer's output, read back in the stack's order
    states = [m.apply({"params": params}, ids, attention_mask=mask, output_hidden_states=True).hidden_states
              for m in (runs["blocked"][3], runs["einsum"][3])]
    assert len(states[0]) == len(states[1]) == 8
    for a, b in zip(*states):
        np.testing.assert_allclose(np.asarray(a)[real], np.asarray(b)[real], atol=2e-5, rtol=0)
    init = [m.init(jax.random.PRNGKey(0), ids)["params"] for m in (runs["blocked"][3], runs["einsum"][3])]
    assert jax.tree.structure(init[0]) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(init[0]), jax.tree.leaves(init[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_global_layer_too_large_for_one_block_runs_in_blocks_of_queries_with_the_same_result(monkeypatch):
    """Blocked path, global layer: under DENSE_SCORES_BYTES one block kept for the backward pass; above it
    (here forced: 0 bytes) blocks of GLOBAL_BLOCK queries (forced: 64, so T = 150 takes 3, the last one
    padded), each recomputed in the backward. Values and gradients equal the dense reference either way."""
    q, k, v = _qkv(seed=4)
    segments = _segments()
    weights = jnp.asarray(np.random.default_rng(5).normal(size=(B, T, N, D))) * (segments > 0)[..., None, None]
    want = _value_and_grads(lambda q, k, v: dense(q, k, v, segments, SCALE, None), q, k, v, weights)
    whole = _value_and_grads(lambda q, k, v: fused.attend(q, k, v, segments, SCALE, None, "blocked"), q, k, v, weights)
    assert "scan[" not in str(jax.make_jaxpr(lambda q: fused.attend(q, k, v, segments, SCALE, None, "blocked"))(q))
    monkeypatch.setattr(fused, "DENSE_SCORES_BYTES", 0)
    monkeypatch.setattr(fused, "GLOBAL_BLOCK", 64)
    blocks = _value_and_grads(lambda q, k, v: fused.attend(q, k, v, segments, SCALE, None, "blocked"), q, k, v, weights)
    assert "scan[" in str(jax.make_jaxpr(lambda q: fused.attend(q, k, v, segments, SCALE, None, "blocked"))(q))
    for got in (whole, blocks):
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(_real(a, segments), _real(b, segments), atol=2e-5, rtol=0)


def test_softmax_context_backward_in_float64_against_numpy():
    """The blocked paths' softmax times values (its backward takes the row sums over the head dim) against the
    softmax's Jacobian written out in numpy: every score, value and cotangent, a row with every key masked
    (uniform, as masked_softmax makes it; its scores get no gradient)."""
    from jaxbert.model.softmax import softmax_context
    jax.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(7)
        s, v, g = rng.normal(size=(2, 3, 6, 9)), rng.normal(size=(2, 3, 9, 4)), rng.normal(size=(2, 3, 6, 4))
        mask = rng.random(size=(2, 1, 6, 9)) > 0.4
        mask[1, 0, 2] = False
        out, vjp = jax.vjp(lambda a, b: softmax_context(a, jnp.asarray(mask), b), jnp.asarray(s), jnp.asarray(v))
        ds, dv = vjp(jnp.asarray(g))
        top = np.where(mask.any(-1, keepdims=True), np.where(mask, s, -np.inf).max(-1, keepdims=True), 0.0)
        e = np.where(mask, np.exp(s - top), 0.0)
        p = np.where(mask.any(-1, keepdims=True), e / np.maximum(e.sum(-1, keepdims=True), 1e-300), 1 / 9)
        np.testing.assert_allclose(np.asarray(out), p @ v, rtol=1e-12, atol=1e-12)
        dp = g @ np.swapaxes(v, -1, -2)
        jac = p[..., :, None] * (np.eye(9) - p[..., None, :])  # d p_k / d s_j over each row: [.., k, j]
        want_ds = np.where(mask, np.einsum("...k,...kj->...j", dp, jac), 0.0)
        np.testing.assert_allclose(np.asarray(ds), want_ds, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(dv), np.swapaxes(p, -1, -2) @ g, rtol=1e-12, atol=1e-12)
        assert np.abs(want_ds[1, :, 2]).max() == 0 and np.abs(want_ds).max() > 0.1
    finally:
        jax.config.update("jax_enable_x64", False)
