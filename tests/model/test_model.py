import contextlib
import functools
import io
from types import SimpleNamespace

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from jax.ad_checkpoint import print_saved_residuals

import jaxbert
from jaxbert.model.options import ModelOptions, compiling_for
from jaxbert import (MODEL_CLASSES, BertConfig, BertForMaskedLM, BertForPreTraining, BertModel,
                     dummy_inputs, param_count, preset, scan_params, unscan_params)
from tests.helpers.transformers4 import positions as position_types

TINY = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=64, num_labels=3)


def _config_for(name, **changes):
    cfg = TINY.replace(**changes)
    return cfg.replace(is_decoder=True) if name == "BertLMHeadModel" else cfg


def _inputs(B=3, L=11, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, TINY.vocab_size, (B, L)).astype(np.int32)
    tt = np.zeros_like(ids)
    tt[:, L // 2:] = 1
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return ids, tt, mask


@functools.lru_cache(maxsize=None)
def _init(cls_name, **changes):
    model = MODEL_CLASSES[cls_name](_config_for(cls_name, **dict(changes)))
    return model, model.init(jax.random.key(0), *dummy_inputs(cls_name, 2, 8))


@pytest.mark.parametrize("name, cls, expected", [
    ("bert-base-cased", BertForMaskedLM, 108_340_804),
    ("bert-base-uncased", BertModel, 109_482_240),
    ("bert-base-uncased", BertForPreTraining, 110_106_428),
    ("bert-large-uncased", BertForMaskedLM, 335_174_458),
])
def test_param_counts_match_transformers(name, cls, expected):
    model = cls(preset(name), ModelOptions(scan_layers=True))  # eval_shape allocates nothing
    shapes = jax.eval_shape(model.init, jax.random.key(0), *dummy_inputs(cls, 1, 8))
    assert param_count(shapes) == expected


def _hf_key(path: tuple) -> str:
    """The naming rule: kernel/scale/embedding -> weight, joined with dots."""
    leaf = {"kernel": "weight", "scale": "weight", "embedding": "weight"}.get(path[-1], path[-1])
    return ".".join(path[:-1] + (leaf,))


@pytest.mark.parametrize("position", position_types("absolute", "relative_key_query"))
@pytest.mark.parametrize("cls_name", sorted(MODEL_CLASSES))
def test_param_paths_are_transformers_state_dict_keys(cls_name, position):
    transformers = pytest.importorskip("transformers")
    cfg = _config_for(cls_name, position_embedding_type=position,
                      add_cross_attention=cls_name == "BertLMHeadModel")
    model = MODEL_CLASSES[cls_name](cfg)
    params = model.init(jax.random.key(0), *dummy_inputs(cls_name, 1, 8))["params"]
    ours = {_hf_key(p): v.shape for p, v in flatten_dict(params).items()}

    hf_model = getattr(transformers, cls_name)(transformers.BertConfig(**cfg.to_dict()))
    theirs = {}
    for key, tensor in hf_model.state_dict().items():
        if key.endswith("position_ids") or key.endswith("token_type_ids"):
            continue  # buffers, not params
        if ".decoder." in key:
            continue  # the tied decoder: word embeddings + cls.predictions.bias
        shape = tuple(tensor.shape)
        is_linear = key.endswith(".weight") and "embeddings" not in key and "LayerNorm" not in key \
            and "distance_embedding" not in key
        theirs[key] = shape[::-1] if is_linear else shape
    assert ours == theirs


@pytest.mark.parametrize("cls_name", sorted(MODEL_CLASSES))
def test_every_head_returns_the_right_shapes(cls_name):
    model, variables = _init(cls_name)
    B, L, V, H = 2, 8, TINY.vocab_size, TINY.hidden_size
    out = model.apply(variables, *dummy_inputs(cls_name, B, L), output_hidden_states=True,
                      output_attentions=True)
    expected = {
        "BertModel": None, "BertForMaskedLM": (B, L, V), "BertLMHeadModel": (B, L, V),
        "BertForPreTraining": (B, L, V), "BertForNextSentencePrediction": (B, 2),
        "BertForSequenceClassification": (B, 3), "BertForTokenClassification": (B, L, 3),
        "BertForQuestionAnswering": (B, L, 3), "BertForMultipleChoice": (B, 2),
    }[cls_name]
    assert (None if out.logits is None else out.logits.shape) == expected
    rows = 2 * B if cls_name == "BertForMultipleChoice" else B
    assert out.last_hidden_state.shape == (rows, L, H)
    assert len(out.hidden_states) == TINY.num_hidden_layers + 1
    assert [a.shape for a in out.attentions] == [(rows, TINY.num_attention_heads, L, L)] * 2
    if cls_name == "BertForPreTraining":
        assert out.seq_relationship_logits.shape == (B, 2) and out.pooler_output.shape == (B, H)
    if cls_name == "BertForQuestionAnswering":
        assert out.start_logits.shape == out.end_logits.shape == (B, L)


def test_init_follows_transformers():
    _, variables = _init("BertForPreTraining")
    p = variables["params"]
    emb = p["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert np.all(emb[TINY.pad_token_id] == 0)
    assert abs(float(jnp.std(emb[1:])) - TINY.initializer_range) < 0.002
    layer = p["bert"]["encoder"]["layer"]["1"]
    assert np.all(layer["output"]["LayerNorm"]["scale"] == 1) and np.all(layer["output"]["LayerNorm"]["bias"] == 0)
    assert np.all(layer["attention"]["self"]["query"]["bias"] == 0)
    assert np.all(p["cls"]["predictions"]["bias"] == 0)
    assert abs(float(jnp.std(layer["intermediate"]["dense"]["kernel"])) - TINY.initializer_range) < 0.003


@pytest.mark.parametrize("pos", ["absolute", "relative_key_query"])
def test_padding_tokens_do_not_leak(pos):
    model, variables = _init("BertForMaskedLM", position_embedding_type=pos)
    ids, tt, mask = _inputs()
    changed = np.where(mask == 0, (ids + 17) % TINY.vocab_size, ids)
    a = model.apply(variables, ids, tt, attention_mask=mask).logits
    b = model.apply(variables, changed, tt, attention_mask=mask).logits
    real = mask.astype(bool)
    assert np.abs(np.asarray(a)[real] - np.asarray(b)[real]).max() < 1e-6
    assert np.abs(np.asarray(a)[~real] - np.asarray(b)[~real]).max() > 1e-3  # padded rows did change


def test_dropout_only_when_not_deterministic():
    model, variables = _init("BertForMaskedLM")
    ids, tt, mask = _inputs()
    base = model.apply(variables, ids, tt, attention_mask=mask).logits
    again = model.apply(variables, ids, tt, attention_mask=mask, deterministic=True,
                        rngs={"dropout": jax.random.key(3)}).logits
    np.testing.assert_array_equal(base, again)
    noisy = model.apply(variables, ids, tt, attention_mask=mask, deterministic=False,
                        rngs={"dropout": jax.random.key(3)}).logits
    noisy2 = model.apply(variables, ids, tt, attention_mask=mask, deterministic=False,
                         rngs={"dropout": jax.random.key(4)}).logits
    assert float(jnp.abs(noisy - base).max()) > 1e-2
    assert float(jnp.abs(noisy - noisy2).max()) > 1e-2


@pytest.mark.parametrize("pos", ["absolute", "relative_key"])
def test_scan_remat_and_attention_impls_agree(pos):
    model, variables = _init("BertForPreTraining", position_embedding_type=pos)
    ids, tt, mask = _inputs()
    ref = model.apply(variables, ids, tt, attention_mask=mask, output_hidden_states=True)
    scanned = scan_params(variables)
    assert scanned["params"]["bert"]["encoder"]["layer"]["output"]["dense"]["kernel"].shape == (2, 37, 32)
    for scan in (False, True):
        for remat in ("none", "full", "dots"):
            for impl in ("einsum", "dot_product"):
                m = BertForPreTraining(model.config, ModelOptions(scan_layers=scan, remat_policy=remat, attention_impl=impl))
                out = m.apply(scanned if scan else variables, ids, tt, attention_mask=mask,
                              output_hidden_states=True)
                for a, b in zip(out.hidden_states, ref.hidden_states):
                    np.testing.assert_allclose(a, b, atol=1e-6, err_msg=f"{scan=} {remat=} {impl=}")
                np.testing.assert_allclose(out.prediction_logits, ref.prediction_logits, atol=1e-6)
    back = unscan_params(scanned)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(lambda a, b: bool(jnp.all(a == b)), back, variables))


def test_scanned_gradients_match_per_layer():
    model, variables = _init("BertForMaskedLM")
    ids, tt, mask = _inputs()

    def loss(params, m):
        return jnp.mean(m.apply(params, ids, tt, attention_mask=mask).logits ** 2)

    g = jax.grad(loss)(variables, model)
    scanned_model = BertForMaskedLM(model.config, ModelOptions(scan_layers=True, remat_policy="full"))
    gs = unscan_params(jax.grad(loss)(scan_params(variables), scanned_model))
    diffs = jax.tree_util.tree_map(lambda a, b: float(jnp.abs(a - b).max()), g, gs)
    assert max(jax.tree_util.tree_leaves(diffs)) < 1e-7


@pytest.mark.parametrize("scan", [False, True])
def test_offload_remat_moves_each_layer_input_to_the_host_and_keeps_the_gradients(scan):
    model, variables = _init("BertForMaskedLM")
    ids, tt, mask = _inputs()
    params = scan_params(variables) if scan else variables

    def loss(p, m):
        return jnp.mean(m.apply(p, ids, tt, attention_mask=mask).logits ** 2)

    L, (B, T), H = model.config.num_hidden_layers, ids.shape, model.config.hidden_size
    shape = f"[{L},{B},{T},{H}]" if scan else f"[{B},{T},{H}]"  # a layer input, or all of them stacked

    def saved(policy):
        """(device, host) counts of the [B, T, H]-shaped values autodiff keeps for the backward pass."""
        m = BertForMaskedLM(model.config, ModelOptions(scan_layers=scan, remat_policy=policy))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            print_saved_residuals(lambda p: loss(p, m), params)
        lines = out.getvalue().splitlines()
        return sum(f"f32{shape} " in x for x in lines), sum(f"f32<host>{shape} " in x for x in lines)

    ref = jax.grad(loss)(params, BertForMaskedLM(model.config, ModelOptions(scan_layers=scan)))
    off = jax.grad(loss)(params, BertForMaskedLM(model.config, ModelOptions(scan_layers=scan, remat_policy="offload")))
    diffs = jax.tree_util.tree_map(lambda a, b: float(jnp.abs(a - b).max()), ref, off)
    assert max(jax.tree_util.tree_leaves(diffs)) < 1e-6
    # what full remat keeps on the device per layer (its input) is kept in host memory instead, and
    # nothing else moves: one per layer unrolled, one stacked [L, B, T, H] scanned
    (full_device, full_host), (off_device, off_host) = saved("full"), saved("offload")
    n = 1 if scan else L
    assert full_host == 0 and off_host == n
    assert off_device == full_device - n


def test_masked_positions_gather_before_the_head():
    model, variables = _init("BertForMaskedLM")
    ids, tt, mask = _inputs()
    positions = np.array([[1, 4, 0], [2, 2, 6], [0, 3, 1]], np.int32)
    full = model.apply(variables, ids, tt, attention_mask=mask).logits
    picked = model.apply(variables, ids, tt, attention_mask=mask, masked_positions=positions).logits
    assert picked.shape == (3, 3, TINY.vocab_size)
    expected = np.take_along_axis(np.asarray(full), positions[..., None], axis=1)
    np.testing.assert_allclose(picked, expected, atol=1e-6)


def test_attentions_are_masked_distributions():
    model, variables = _init("BertModel")
    ids, tt, mask = _inputs()
    out = model.apply(variables, ids, tt, attention_mask=mask, output_attentions=True)
    probs = np.asarray(out.attentions[0])
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert probs[2, :, :, 4:].max() == 0.0  # padded keys get no weight


def test_head_mask_zeroes_heads():
    model, variables = _init("BertModel")
    ids, tt, mask = _inputs()
    head_mask = jnp.array([1.0, 0.0, 1.0, 1.0])
    out = model.apply(variables, ids, tt, attention_mask=mask, head_mask=head_mask, output_attentions=True)
    assert float(jnp.abs(out.attentions[1][:, 1]).max()) == 0.0
    plain = model.apply(variables, ids, tt, attention_mask=mask)
    assert float(jnp.abs(out.last_hidden_state - plain.last_hidden_state).max()) > 1e-3


def test_decoder_is_causal():
    model, variables = _init("BertLMHeadModel")
    ids, tt, _ = _inputs()
    a = model.apply(variables, ids, tt).logits
    later = ids.copy()
    later[:, 6:] = (later[:, 6:] + 5) % TINY.vocab_size
    b = model.apply(variables, later, tt).logits
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert float(jnp.abs(a[:, 6:] - b[:, 6:]).max()) > 1e-3


# bf16 compute with fp32 params: documented tolerance in README.md ("Numerics").
BF16_TOLERANCE = 0.1


def test_bf16_compute_stays_close_to_fp32():
    model, variables = _init("BertForMaskedLM")
    ids, tt, mask = _inputs()
    ref = model.apply(variables, ids, tt, attention_mask=mask, output_hidden_states=True)
    bf16 = BertForMaskedLM(model.config, ModelOptions(dtype=jnp.bfloat16))
    out = bf16.apply(variables, ids, tt, attention_mask=mask, output_hidden_states=True)
    assert out.logits.dtype == jnp.bfloat16
    real = mask.astype(bool)
    for a, b in zip(out.hidden_states, ref.hidden_states):
        diff = np.abs(np.asarray(a, np.float32) - np.asarray(b))[real].max()
        assert 0 < diff < BF16_TOLERANCE
    diff = np.abs(np.asarray(out.logits, np.float32) - np.asarray(ref.logits))[real].max()
    assert diff < BF16_TOLERANCE
    assert jax.tree_util.tree_leaves(variables)[0].dtype == jnp.float32


@pytest.mark.parametrize("tied", [True, False])
def test_mlm_bias_reaches_the_compute_dtype_after_the_decoder_matmul(tied):
    """The MLM head's bias [V] is cast to bf16 after the decoder's matmul, as the head traced it until 2f77379:
    with the cast traced first, XLA's TPU compile of bert-base's train step staged buffers in on-chip memory
    otherwise and the step accessed 1.6 GB more (docs/tpu.md, issue 50 item 31)."""
    model, variables = _init("BertForMaskedLM", tie_word_embeddings=tied)
    bf16 = BertForMaskedLM(model.config, ModelOptions(dtype=jnp.bfloat16))
    ids, tt, mask = _inputs()
    with compiling_for([SimpleNamespace(device_kind="TPU v4")]):  # not the CPU's written-out decoder
        eqns = jax.make_jaxpr(lambda v: bf16.apply(v, ids, tt, attention_mask=mask).logits)(variables).jaxpr.eqns
    V = TINY.vocab_size
    matmul = [i for i, e in enumerate(eqns) if e.primitive.name in ("dot_general", "jit", "pjit")
              and e.outvars[0].aval.ndim >= 2 and e.outvars[0].aval.shape[-1] == V]
    cast = [i for i, e in enumerate(eqns) if e.primitive.name == "convert_element_type"
            and e.invars[0].aval.shape == (V,) and e.invars[0].aval.dtype == jnp.float32]
    assert len(matmul) == 1 and len(cast) == 1
    assert eqns[cast[0]].outvars[0].aval.dtype == jnp.bfloat16
    assert cast[0] > matmul[0]


def test_param_dtype_is_separate_from_compute_dtype():
    model = BertForMaskedLM(TINY, ModelOptions(dtype=jnp.float32, param_dtype=jnp.bfloat16))
    variables = model.init(jax.random.key(0), *dummy_inputs(BertForMaskedLM, 1, 8))
    assert {x.dtype for x in jax.tree_util.tree_leaves(variables)} == {jnp.dtype(jnp.bfloat16)}


def test_logical_axes_for_sharding():
    model = BertForMaskedLM(TINY, ModelOptions(scan_layers=True))
    boxed = jax.eval_shape(model.init_boxed, jax.random.key(0), *dummy_inputs(BertForMaskedLM, 1, 8))
    specs = flatten_dict(jax.tree_util.tree_map(
        lambda x: x.names, boxed["params"], is_leaf=lambda x: hasattr(x, "names")))
    assert specs[("bert", "embeddings", "word_embeddings", "embedding")] == ("vocab", "embed")
    assert specs[("bert", "encoder", "layer", "intermediate", "dense", "kernel")] == ("layers", "embed", "mlp")
    assert specs[("cls", "predictions", "bias")] == ("vocab",)


def test_invalid_options_are_named():
    with pytest.raises(ValueError, match="attention_impl"):
        BertModel(TINY, ModelOptions(attention_impl="flash")).init(jax.random.key(0), *dummy_inputs(BertModel, 1, 4))
    with pytest.raises(ValueError, match="remat_policy"):
        BertModel(TINY, ModelOptions(remat_policy="some")).init(jax.random.key(0), *dummy_inputs(BertModel, 1, 4))


def test_public_api_reexports():
    for name in ("BertConfig", "BertModel", "BertForMaskedLM", "BertLayer", "BertSelfAttention",
                 "BertEncoder", "BertLMPredictionHead", "scan_params", "unscan_params"):
        assert hasattr(jaxbert, name)


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-6), (jnp.bfloat16, 1e-2)])
def test_gelu_with_saved_cdf_matches_autodiff(dtype, tol):
    from jaxbert.model.activations import gelu_exact
    x = jnp.linspace(-6.0, 6.0, 1001).astype(dtype)
    ref = lambda x: jax.nn.gelu(x, approximate=False)
    np.testing.assert_allclose(np.float32(gelu_exact(x)), np.float32(ref(x)), atol=tol, rtol=tol)
    g = jax.vmap(jax.grad(lambda v: gelu_exact(v).astype(jnp.float32)))(x)
    g_ref = jax.vmap(jax.grad(lambda v: ref(v).astype(jnp.float32)))(x)
    np.testing.assert_allclose(np.float32(g), np.float32(g_ref), atol=tol, rtol=tol)
    assert float(g[0]) < 1e-6 and abs(float(g[-1]) - 1) < tol and abs(float(g[500]) - 0.5) < tol


def test_dense_is_a_plain_matmul_with_flax_params():
    from jaxbert.model.layers.dense import Dense
    x = jax.random.normal(jax.random.key(0), (2, 3, 5, 4))
    dense = Dense(6)
    params = dense.init(jax.random.key(1), x)
    ref = flax.linen.Dense(6)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(ref.init(jax.random.key(1), x))
    np.testing.assert_allclose(dense.apply(params, x), ref.apply(params, x), atol=1e-6)
    assert Dense(6, dtype=jnp.bfloat16).apply(params, x).dtype == jnp.bfloat16
