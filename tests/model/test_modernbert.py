"""ModernBERT against transformers: every class, eager and sdpa attention, inputs longer than the
local window, padded batches, both poolings; float32 within 1e-5 and float64 within 1e-10 at
every hidden state and every head output. Then jaxbert's own options (dot_product attention,
scanned layers, remat, chunks) give the same logits; the init follows ModernBERT's; configs
jaxbert cannot honour are refused by name; mmBERT- and Ettin-shaped models size as transformers'.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from scipy.stats import truncnorm

from jaxbert.model.configs import ConfigError
from jaxbert.model.modernbert import ModernBertConfig, build
from jaxbert.model.layers.rotary import apply_rope, inverse_frequencies, rope_tables
from jaxbert.model.modernbert.config import FULL, SLIDING
from jaxbert.model.modernbert.table import Table, param_count
from jaxbert.model.options import ModelOptions
from jaxbert.parity.grad import float64_rotary
from tests.helpers.modernbert import CLASSES, LENGTH, TINY, config_of, padded_inputs, params_of, tiny_hf

HEAD_OUTPUTS = ("logits", "start_logits", "end_logits")
TINY_GLOBAL_THETA = 160000.0  # ModernBertConfig's default global_rope_theta, which TINY keeps


def _run_hf(hf, ids, mask, attn):
    """transformers' outputs, hidden_states[-1] being the last layer's own output on either version:
    4.x returns it there, 5.x returns last_hidden_state (after final_norm), so on 5.x it is taken
    from the final norm's input by a hook (the final norm is checked by last_hidden_state / the heads)."""
    # ModernBERT refuses set_attn_implementation; its attention modules read the shared config's
    # _attn_implementation at each call (eager and sdpa build the same modules), so switch it there.
    hf.config._attn_implementation = attn
    seen = {}
    hook = hf.base_model.final_norm.register_forward_hook(lambda m, i, o: seen.update(before=i[0], after=o))
    with torch.no_grad():
        out = hf(torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    hook.remove()
    if torch.equal(out.hidden_states[-1], seen["after"]):
        out.hidden_states = out.hidden_states[:-1] + (seen["before"],)
    return out


def _run_jax(module, params, ids, mask):
    apply = jax.jit(lambda p, i, m: module.apply({"params": p}, i, attention_mask=m, output_hidden_states=True))
    return apply(params, jnp.asarray(ids), jnp.asarray(mask))


def _max_errors(hf_out, jax_out, mask, layers=TINY["num_hidden_layers"]) -> dict:
    """Largest |difference| per stage: every hidden state (embeddings, each layer), the head outputs,
    at real tokens. A padded query whose sliding window holds no real key has no defined output:
    transformers 5's sdpa path gives it 0, its eager path (and 4.x's both) the mean of every value,
    jaxbert's einsum path the latter; no real token, pooled vector or loss ever reads it."""
    errors = {}
    real = np.asarray(mask).reshape(-1, np.shape(mask)[-1]).astype(bool)  # [B*C, T] for multiple choice
    at_real = lambda x: x[real] if x.shape[:2] == real.shape else x  # noqa: E731 (per-sequence outputs whole)
    assert len(hf_out.hidden_states) == len(jax_out.hidden_states) == layers + 1
    for i, (a, b) in enumerate(zip(hf_out.hidden_states, jax_out.hidden_states)):
        errors[f"hidden {i}"] = float(np.abs(at_real(a.numpy()) - at_real(np.asarray(b))).max())
    for name in HEAD_OUTPUTS + ("last_hidden_state",):
        a = getattr(hf_out, name, None)
        if a is not None:
            b = np.asarray(getattr(jax_out, name))
            assert a.shape == b.shape, name
            errors[name] = float(np.abs(at_real(a.numpy()) - at_real(b)).max())
    return errors


CASES = [(c, "cls") for c in CLASSES] + [("ModernBertForSequenceClassification", "mean"),
                                         ("ModernBertForMultipleChoice", "mean")]


@pytest.mark.parametrize("name,pooling", CASES)
def test_every_class_matches_transformers_eager_and_sdpa_in_float32(name, pooling):
    hf = tiny_hf(name, seed=CASES.index((name, pooling)), classifier_pooling=pooling)
    module, params = build(name, config_of(hf)), params_of(hf, name)
    # Multiple choice is left-padded: its 'cls' pooling reads the first real token, not position 0.
    ids, mask = padded_inputs(name, left=name.endswith("MultipleChoice"))
    out = _run_jax(module, params, ids, mask)
    for attn in ("eager", "sdpa"):
        errors = _max_errors(_run_hf(hf, ids, mask, attn), out, mask)
        assert max(errors.values()) < 1e-5, (attn, errors)
        assert any(k in errors for k in HEAD_OUTPUTS + ("last_hidden_state",))


@pytest.mark.parametrize("scan", [False, True])
def test_a_config_with_every_bias_untied_decoder_and_one_rope_theta_matches_transformers(scan):
    """ModernBERT-base's layer pattern (global every 3rd) on 5 layers; biases everywhere; the decoder
    untied; local_rope_theta null (transformers then uses the global theta); another activation."""
    name = "ModernBertForMaskedLM"
    # transformers 5 cannot build from a null local_rope_theta (TypeError in its rotary init): there
    # one theta is the global one given twice.
    one_theta = None if int(transformers.__version__.split(".")[0]) < 5 else TINY_GLOBAL_THETA
    hf = tiny_hf(name, seed=31, num_hidden_layers=5, global_attn_every_n_layers=3, norm_bias=True,
                 attention_bias=True, mlp_bias=True, classifier_bias=True, tie_word_embeddings=False,
                 local_rope_theta=one_theta, hidden_activation="gelu_pytorch_tanh", classifier_activation="silu")
    config = config_of(hf)
    assert config.local_theta == config.global_theta and not config.tie_word_embeddings
    ids, mask = padded_inputs(name)
    out = _run_jax(build(name, config, ModelOptions(scan_layers=scan)), params_of(hf, name, scan), ids, mask)
    assert set(params_of(hf, name)["decoder"]) == {"kernel", "bias"}
    for attn in ("eager", "sdpa"):
        errors = _max_errors(_run_hf(hf, ids, mask, attn), out, mask, layers=5)
        assert max(errors.values()) < 1e-5, (attn, errors)


def _float64_rope(hf):
    """transformers takes RoPE's inverse frequencies, angles, cos and sin in float32 even in a
    float64 model; give it float64 tables (parity's own patch), so the comparison below tests
    everything else to 1e-10."""
    float64_rotary(hf)


@pytest.mark.parametrize("name,pooling", [("ModernBertForMaskedLM", "cls"),
                                          ("ModernBertForSequenceClassification", "mean"),
                                          ("ModernBertForQuestionAnswering", "cls")])
def test_float64_matches_transformers_sdpa_within_1e_10(name, pooling):
    hf = tiny_hf(name, seed=7, classifier_pooling=pooling).double()
    _float64_rope(hf)
    ids, mask = padded_inputs(name)
    with jax.enable_x64(True):
        module = build(name, config_of(hf), ModelOptions(dtype=jnp.float64, param_dtype=jnp.float64))
        out = _run_jax(module, params_of(hf, name, dtype=np.float64), ids, mask)
        assert out.hidden_states[-1].dtype == jnp.float64
        errors = _max_errors(_run_hf(hf, ids, mask, "sdpa"), out, mask)
        assert max(errors.values()) < 1e-10, errors
        # transformers' eager path takes its softmax in float32 whatever the model's dtype, so in float64
        # it is float32-exact only (1e-6 here); and a padded query with no real key in its window comes
        # out NaN there (finfo(float64).min overflows to -inf in float32), which the next global layer
        # spreads to every position. So eager gets padding within the window's reach.
        ids, mask = padded_inputs(name, pads=((1, 3), (2, 4)))
        out = _run_jax(module, params_of(hf, name, dtype=np.float64), ids, mask)
        errors = _max_errors(_run_hf(hf, ids, mask, "eager"), out, mask)
        assert max(errors.values()) < 1e-6, errors


def test_the_window_and_the_rope_thetas_matter():
    """The checks above would not notice a wrong window or theta if the inputs never reached them:
    a wider window, or swapped thetas, move the logits by far more than 1e-5."""
    name = "ModernBertForMaskedLM"
    hf = tiny_hf(name, seed=3)
    ids, mask = padded_inputs(name)
    ref = _run_jax(build(name, config_of(hf)), params_of(hf, name), ids, mask).logits
    for change in (dict(local_attention=16), dict(global_rope_theta=10000.0, local_rope_theta=160000.0)):
        other = config_of(hf).replace(**change)
        moved = _run_jax(build(name, other), params_of(hf, name), ids, mask).logits
        assert float(jnp.abs(moved - ref).max()) > 1e-3, change


def _logits(name, hf, options, scan=False, mask_rows=None):
    ids, mask = padded_inputs(name)
    out = _run_jax(build(name, config_of(hf), options), params_of(hf, name, scan_layers=scan), ids, mask)
    return np.asarray(out.logits), mask


def test_dot_product_attention_equals_einsum():
    name = "ModernBertForTokenClassification"
    hf = tiny_hf(name, seed=11)
    ref, mask = _logits(name, hf, ModelOptions())
    for scan in (False, True):  # scanned: the layer's kind is data and lax.cond picks the window
        got, _ = _logits(name, hf, ModelOptions(attention_impl="dot_product", scan_layers=scan), scan)
        real = mask.astype(bool)
        # Real positions agree; a padded query with no real key in its window attends uniformly in the
        # einsum path (as transformers' eager path) and differently in XLA's kernel: outputs nobody reads.
        np.testing.assert_allclose(got[real], ref[real], atol=2e-6, rtol=0)


@pytest.fixture(scope="module")
def mlm_reference():
    """A tiny MLM and its plain (unscanned, einsum, no remat) outputs, shared by the option tests."""
    name = "ModernBertForMaskedLM"
    hf = tiny_hf(name, seed=13)
    ids, mask = padded_inputs(name)
    return hf, _run_jax(build(name, config_of(hf)), params_of(hf, name), ids, mask)


@pytest.mark.parametrize("options", [
    ModelOptions(scan_layers=True),
    ModelOptions(scan_layers=True, remat_policy="full", attention_chunks=4, ffn_chunks=3),
    ModelOptions(remat_policy="dots", attention_chunks=2, ffn_chunks=2),
], ids=["scan", "scan-remat-chunks", "remat-chunks"])
def test_scan_remat_and_chunks_give_the_same_outputs(options, mlm_reference):
    name = "ModernBertForMaskedLM"
    hf, ref = mlm_reference
    ids, mask = padded_inputs(name)
    got = _run_jax(build(name, config_of(hf), options), params_of(hf, name, scan_layers=options.scan_layers), ids, mask)
    np.testing.assert_allclose(got.logits, ref.logits, atol=2e-6, rtol=0)
    assert len(got.hidden_states) == len(ref.hidden_states) == 4
    for a, b in zip(ref.hidden_states, got.hidden_states):  # the scanned stack's per-layer states, in order
        np.testing.assert_allclose(b, a, atol=2e-6, rtol=0)


def test_masked_positions_give_the_logits_at_those_positions(mlm_reference):
    name = "ModernBertForMaskedLM"
    hf, ref = mlm_reference
    ids, mask = padded_inputs(name)
    positions = np.array([[0, 5, 23], [1, 1, 16], [8, 2, 3]], np.int32)
    module = build(name, config_of(hf))
    got = jax.jit(lambda p: module.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                                         masked_positions=positions).logits)(params_of(hf, name))
    assert got.shape == (3, 3, TINY["vocab_size"])
    np.testing.assert_allclose(got, np.take_along_axis(np.asarray(ref.logits), positions[..., None], axis=1),
                               atol=2e-6, rtol=0)


def test_scanned_remat_gradients_equal_unscanned():
    name = "ModernBertForSequenceClassification"
    hf = tiny_hf(name, seed=17)
    ids, mask = padded_inputs(name)
    grads = []
    for scan in (False, True):
        # "offload": full remat with each layer's input moved to host memory (layers are checkpoint_named)
        module = build(name, config_of(hf), ModelOptions(scan_layers=scan, remat_policy="offload" if scan else "none"))

        def loss(p, module=module):
            return module.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask)).logits.sum()
        g = jax.jit(jax.grad(loss))(params_of(hf, name, scan_layers=scan))["model"]["layers"]
        grads.append(g["1"]["attn"]["Wqkv"]["kernel"] if not scan else g["scan"]["attn"]["Wqkv"]["kernel"][0])
    np.testing.assert_allclose(grads[1], grads[0], atol=1e-6, rtol=1e-5)
    assert float(jnp.abs(grads[0]).max()) > 1e-3


def test_dropout_runs_and_chunked_dropout_needs_hash():
    name = "ModernBertForMaskedLM"
    hf = tiny_hf(name, seed=19)
    config = config_of(hf).replace(attention_dropout=0.1, mlp_dropout=0.1, embedding_dropout=0.1)
    ids, mask = padded_inputs(name)
    params = params_of(hf, name)
    run = lambda opts: jax.jit(lambda p: build(name, config, opts).apply(  # noqa: E731
        {"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask), deterministic=False,
        rngs={"dropout": jax.random.PRNGKey(0)}).logits)(params)
    # Hash dropout's mask is a function of position: chunked and whole give the same output.
    whole = run(ModelOptions(dropout_impl="hash"))
    chunked = run(ModelOptions(dropout_impl="hash", attention_chunks=4, ffn_chunks=2))
    np.testing.assert_allclose(chunked, whole, atol=2e-6, rtol=0)
    quiet = _run_jax(build(name, config), params, ids, mask).logits
    assert float(jnp.abs(whole - quiet).max()) > 1e-3  # dropout did act
    with pytest.raises(ValueError, match="attention_chunks=4 with attention dropout needs dropout_impl 'hash'"):
        run(ModelOptions(attention_chunks=4))


def test_options_it_cannot_honour_are_refused_by_name():
    config = ModernBertConfig(**TINY)
    with pytest.raises(ValueError, match="decode=True"):
        build("ModernBertModel", config, ModelOptions(decode=True))
    with pytest.raises(ValueError, match="'BertForMaskedLM' is not a ModernBERT class"):
        build("BertForMaskedLM", config)
    module = build("ModernBertModel", config)
    with pytest.raises(ValueError, match="head_mask"):
        jax.eval_shape(module.init, jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), head_mask=jnp.ones((4,)))


def test_init_follows_modernbert_truncated_normal_per_role():
    config = ModernBertConfig(**dict(TINY, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                     num_labels=5, initializer_range=0.05))
    module = build("ModernBertForSequenceClassification", config)
    params = jax.jit(module.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    r, c = 0.05, config.initializer_cutoff_factor
    layer = params["model"]["layers"]["1"]
    expected = {"Wqkv": (layer["attn"]["Wqkv"]["kernel"], r),
                "attn.Wo": (layer["attn"]["Wo"]["kernel"], r / np.sqrt(2 * 4)),
                "mlp.Wo": (layer["mlp"]["Wo"]["kernel"], r / np.sqrt(2 * 4)),
                "tok_embeddings": (params["model"]["embeddings"]["tok_embeddings"]["embedding"], r),
                "head.dense": (params["head"]["dense"]["kernel"], r / np.sqrt(2 * 4))}
    # std of a normal truncated at +-c standard deviations: sigma * sqrt(1 - 2c phi(c) / (2 Phi(c) - 1))
    shrink = truncnorm(-c, c).std()
    for role, (w, std) in expected.items():
        w = np.asarray(w)
        assert np.abs(w).max() <= c * std * (1 + 1e-6), role
        assert abs(w.std() / (std * shrink) - 1) < 0.05, (role, w.std(), std * shrink)
    classifier = np.asarray(params["classifier"]["kernel"])  # 1280 draws at hidden_size ** -0.5
    assert np.abs(classifier).max() <= c * 256 ** -0.5 * (1 + 1e-6)
    assert abs(classifier.std() / (256 ** -0.5 * shrink) - 1) < 0.1
    assert "attn_norm" not in params["model"]["layers"]["0"] and "bias" not in layer["mlp_norm"]
    assert np.all(np.asarray(layer["mlp_norm"]["scale"]) == 1)
    assert np.all(np.asarray(params["classifier"]["bias"]) == 0)
    assert params["classifier"]["kernel"].shape == (256, 5)


# ---- config ---------------------------------------------------------------------------------

def test_config_reads_every_transformers_field_and_round_trips():
    hf = transformers.ModernBertConfig(**TINY, classifier_pooling="mean", num_labels=4, problem_type="regression")
    data = json.loads(hf.to_json_string())  # as config.json holds it
    data["something_new"] = {"kept": True}
    config = ModernBertConfig.from_dict(data)
    assert config.classifier_pooling == "mean" and config.num_labels == 4 and config.problem_type == "regression"
    assert config.layer_kinds == (FULL, SLIDING, FULL) and config.half_window == 4
    assert (config.global_theta, config.local_theta) == (160000.0, 10000.0)
    back = config.to_dict()
    for key, value in data.items():
        assert back[key] == value, key
    assert ModernBertConfig.from_dict(back) == config


def test_config_reads_the_transformers_5_spellings():
    data = dict(TINY, num_hidden_layers=4, layer_types=[FULL, SLIDING, SLIDING, FULL], sliding_window=16,
                rope_parameters={FULL: {"rope_type": "default", "rope_theta": 80000.0},
                                 SLIDING: {"rope_type": "default", "rope_theta": 5000.0}},
                model_type="modernbert")
    del data["local_attention"], data["global_attn_every_n_layers"]
    config = ModernBertConfig.from_dict(data)
    assert config.layer_kinds == (FULL, SLIDING, SLIDING, FULL)
    assert (config.local_attention, config.half_window) == (32, 16)
    assert (config.global_theta, config.local_theta) == (80000.0, 5000.0)
    back = config.to_dict()
    assert back["layer_types"] == data["layer_types"] and back["rope_parameters"] == data["rope_parameters"]
    # The 4.x keys are written too, with the values in effect, so either reader builds the same model.
    assert (back["global_attn_every_n_layers"], back["local_attention"]) == (3, 32)
    assert (back["global_rope_theta"], back["local_rope_theta"]) == (80000.0, 5000.0)
    again = ModernBertConfig.from_dict(back)
    assert again.to_dict() == back
    assert (again.layer_kinds, again.half_window, again.global_theta, again.local_theta) == \
        (config.layer_kinds, 16, 80000.0, 5000.0)
    assert ModernBertConfig.from_dict(dict(TINY, rope_theta=1234.0)).global_theta == 1234.0


@pytest.mark.parametrize("spelling", ["rope_parameters", "rope_theta", "4.x"])
def test_replacing_a_theta_moves_the_model_whatever_spelling_the_file_had(spelling):
    """One home for the thetas: replace(global_rope_theta=...) on a config read from a 5.x file (whose
    rope_parameters / rope_theta used to win over it) changes the model, and the file written back keeps
    its spelling with the new theta, as transformers reads it."""
    data = dict(TINY)
    if spelling == "rope_parameters":
        data["rope_parameters"] = {FULL: {"rope_type": "default", "rope_theta": 80000.0},
                                   SLIDING: {"rope_type": "default", "rope_theta": 5000.0}}
    elif spelling == "rope_theta":
        data["rope_theta"] = 80000.0
    changed = ModernBertConfig.from_dict(data).replace(global_rope_theta=20000.0, local_rope_theta=3000.0)
    assert (changed.global_theta, changed.local_theta) == (20000.0, 3000.0)
    back = changed.to_dict()
    assert ("rope_parameters" in back, "rope_theta" in back) == (spelling == "rope_parameters", spelling == "rope_theta")
    hf = transformers.ModernBertConfig(**back)  # the reader: transformers' own config class
    params = getattr(hf, "rope_parameters", None)
    if isinstance(params, dict) and FULL in params:  # 5.x
        assert (params[FULL]["rope_theta"], params[SLIDING]["rope_theta"]) == (20000.0, 3000.0)
    else:
        assert (hf.global_rope_theta, hf.local_rope_theta) == (20000.0, 3000.0)
    assert ModernBertConfig.from_dict(back) == changed


@pytest.mark.parametrize("change,message", [
    (dict(layer_types=["full_attention", "chunked_attention", "full_attention"]),
     "layer_types\\[1\\] 'chunked_attention' is not supported"),
    (dict(layer_types=["full_attention", "sliding_attention"]), "layer_types has 2 entries for num_hidden_layers=3"),
    (dict(local_attention=7), "local_attention 7 must be a positive even integer"),
    (dict(local_attention=0), "local_attention 0 must be a positive even integer"),
    (dict(local_attention=8, sliding_window=3), "sliding_window 3 disagrees with local_attention 8"),
    (dict(num_attention_heads=5), "hidden_size \\(32\\) must be divisible by num_attention_heads \\(5\\)"),
    (dict(num_attention_heads=32), "head dim hidden_size / num_attention_heads = 1 must be even"),
    (dict(hidden_activation="swiglu"), "hidden_activation 'swiglu' is unknown"),
    (dict(classifier_activation="nope"), "classifier_activation 'nope' is unknown"),
    (dict(classifier_pooling="max"), "classifier_pooling 'max' is unknown"),
    (dict(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 2.0}}),
     "rope_parameters\\['full_attention'\\] rope_type 'yarn' is not supported"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling .* is not supported"),
    (dict(global_rope_theta=1e4, rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 8e4}}),
     "rope_parameters\\['full_attention'\\].rope_theta 80000.0 disagrees with global_rope_theta 10000.0"),
    (dict(norm_bias="false"), "norm_bias must be true or false, got 'false'"),
    (dict(hidden_size="32"), "hidden_size must be an integer, got '32'"),
    (dict(model_type="bert"), "model_type 'bert' is not a ModernBERT config"),
])
def test_configs_jaxbert_cannot_honour_are_refused_by_name(change, message):
    with pytest.raises(ConfigError, match=message):
        ModernBertConfig.from_dict(dict(TINY, **change))


def test_a_sliding_window_is_not_needed_when_every_layer_is_global():
    config = ModernBertConfig.from_dict(dict(TINY, global_attn_every_n_layers=1, local_attention=None))
    assert config.layer_kinds == (FULL,) * 3
    name = "ModernBertForMaskedLM"
    hf = tiny_hf(name, seed=29, global_attn_every_n_layers=1)
    ids, mask = padded_inputs(name)
    config = config_of(hf).replace(local_attention=None)
    ref = _run_jax(build(name, config), params_of(hf, name), ids, mask).logits
    # Scanned, the one kind stays static, and dot_product needs no window.
    options = ModelOptions(scan_layers=True, attention_impl="dot_product")
    got = _run_jax(build(name, config, options), params_of(hf, name, scan_layers=True), ids, mask).logits
    np.testing.assert_allclose(got, ref, atol=2e-6, rtol=0)  # every query has real keys: all positions agree


# ---- published shapes ---------------------------------------------------------------------------

SHAPES = {
    # mmBERT (its vocabulary is Gemma 2's 256k tokens) and the Ettin encoders' published sizes.
    "mmbert-small": dict(vocab_size=256000, hidden_size=384, intermediate_size=1152, num_hidden_layers=22,
                         num_attention_heads=6, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                         cls_token_id=2, sep_token_id=1),
    "mmbert-base": dict(vocab_size=256000, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                        num_attention_heads=12, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                        cls_token_id=2, sep_token_id=1),
    "ettin-encoder-17m": dict(vocab_size=50368, hidden_size=256, intermediate_size=384, num_hidden_layers=7,
                              num_attention_heads=4),
    "ettin-encoder-150m": dict(vocab_size=50368, hidden_size=768, intermediate_size=1152,
                               num_hidden_layers=22, num_attention_heads=12),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", ["ModernBertForMaskedLM", "ModernBertForSequenceClassification"])
def test_published_shapes_build_abstractly_with_transformers_param_counts(shape, name):
    kwargs = dict(SHAPES[shape], global_attn_every_n_layers=3, local_attention=128, max_position_embeddings=8192)
    config = ModernBertConfig(**kwargs)
    for scan in (False, True):
        module = build(name, config, ModelOptions(scan_layers=scan, param_dtype=jnp.bfloat16))
        abstract = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32)))
        count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(abstract["params"]))
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(abstract["params"]))
        shapes = {p: s for p, s in Table(config, name, scan).leaf_shapes.items()}
        flat = {tuple(k.key for k in path): leaf.shape for path, leaf in
                jax.tree_util.tree_flatten_with_path(abstract["params"])[0]}
        assert flat == shapes, shape
    with torch.device("meta"):
        hf = getattr(transformers, name)(transformers.ModernBertConfig(**kwargs, num_labels=2))
    assert count == param_count(config, name) == sum(p.numel() for p in hf.parameters())


def test_attention_probabilities_match_transformers_eager_and_bf16_runs_close():
    name = "ModernBertModel"
    hf = tiny_hf(name, seed=23)
    ids, mask = padded_inputs(name)
    hf.config._attn_implementation = "eager"
    with torch.no_grad():
        ref = hf(torch.tensor(ids), attention_mask=torch.tensor(mask), output_attentions=True)
    module, params = build(name, config_of(hf)), params_of(hf, name)
    out = jax.jit(lambda p: module.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                                         output_attentions=True))(params)
    assert len(out.attentions) == 3
    for i, (a, b) in enumerate(zip(ref.attentions, out.attentions)):
        np.testing.assert_allclose(np.asarray(b), a.numpy(), atol=1e-5, rtol=0)
    # The sliding layer (1) gives no weight outside the window of a real query; the global ones do.
    probs = np.asarray(out.attentions[1])[0]  # row 0 has no padding: [N, T, T]
    far = np.abs(np.arange(LENGTH)[:, None] - np.arange(LENGTH)[None, :]) > TINY["local_attention"] // 2
    assert probs[:, far].max() == 0 and np.asarray(out.attentions[0])[0][:, far].max() > 1e-3
    bf16 = build(name, config_of(hf), ModelOptions(dtype=jnp.bfloat16))
    low = _run_jax(bf16, params, ids, mask).last_hidden_state
    assert low.dtype == jnp.bfloat16
    real = mask.astype(bool)
    err = np.abs(np.asarray(low, np.float32) - ref.last_hidden_state.numpy())[real]
    assert err.max() < 0.25 and err.mean() < 0.02, (err.max(), err.mean())


def test_rope_tables_are_float64_on_the_float64_path_and_the_same_under_jit():
    """float64 tables from float64 inverse frequencies (they were float32 ones, 6e-8 off, which put
    float64 parity on trained weights 1e-7 out), equal under jit and eagerly (jit once folded the
    float32 power into a constant rounded another way); float32 ones follow transformers' recipe."""
    positions = jnp.arange(512)[None]
    for theta in (10000.0, 160000.0):
        want = np.arange(512)[:, None] * (1.0 / theta ** (np.arange(0, 64, 2) / 64))
        with jax.enable_x64(True):
            eager = rope_tables(positions, 64, theta, jnp.float64)
            jitted = jax.jit(rope_tables, static_argnums=(1, 2, 3))(positions, 64, theta, jnp.float64)
            for cos, sin in (eager, jitted):
                np.testing.assert_allclose(np.asarray(cos)[0, :, :32], np.cos(want), rtol=0, atol=1e-12)
                np.testing.assert_allclose(np.asarray(sin)[0, :, 32:], np.sin(want), rtol=0, atol=1e-12)
        eager = rope_tables(positions, 64, theta, jnp.float32)
        jitted = jax.jit(rope_tables, static_argnums=(1, 2, 3))(positions, 64, theta, jnp.float32)
        np.testing.assert_array_equal(np.asarray(eager[0]), np.asarray(jitted[0]))
        torch_inv = (1.0 / (theta ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))).numpy()
        ours = inverse_frequencies(64, theta, np.float32)
        assert ours.dtype == np.float32 and np.abs(ours / torch_inv - 1).max() <= 2 ** -23  # within an ulp


@pytest.mark.parametrize("layout", ["BTND", "BNDT"])
def test_rope_and_its_gradient_are_the_rotation_and_its_transpose(layout):
    """apply_rope's value is each position's pair rotation (cos -sin; sin cos on dims i, i + D / 2) and its
    gradient that rotation transposed, checked in float64 against the [D, D] matrices built here with NumPy,
    on both layouts."""
    B, T, N, D = 2, 7, 3, 8
    rng = np.random.default_rng(0)
    x, g = rng.normal(size=(2, B, T, N, D))
    positions = rng.integers(0, 50, size=(B, T))
    angles = positions[..., None] * (1.0 / 10000.0 ** (np.arange(0, D, 2) / D))  # [B, T, D / 2]
    rot = np.zeros((B, T, D, D))
    for i in range(D // 2):
        c, s = np.cos(angles[..., i]), np.sin(angles[..., i])
        rot[..., i, i], rot[..., i, i + D // 2] = c, -s
        rot[..., i + D // 2, i], rot[..., i + D // 2, i + D // 2] = s, c
    want = np.einsum("BTed,BTNd->BTNe", rot, x)
    want_grad = np.einsum("BTed,BTNe->BTNd", rot, g)  # R^T g
    to = (lambda a: a) if layout == "BTND" else (lambda a: np.transpose(a, (0, 2, 3, 1)))
    back = (lambda a: a) if layout == "BTND" else (lambda a: np.transpose(a, (0, 3, 1, 2)))
    with jax.enable_x64(True):
        cos, sin = rope_tables(jnp.asarray(positions), D, 10000.0, jnp.float64)
        y, vjp = jax.vjp(lambda a: apply_rope(a, cos, sin, layout=layout), jnp.asarray(to(x)))
        (grad,) = vjp(jnp.asarray(to(g)))
        np.testing.assert_allclose(back(np.asarray(y)), want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(back(np.asarray(grad)), want_grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bias", [True, False])
def test_rotary_qkv_backward_equals_autodiff_of_its_forward(bias):
    """The fused path's Wqkv (rotary_qkv) has a hand-written backward (RoPE's transpose as a matmul, the
    gradient matmuls per q, k, v block); in float64 it equals what autodiff derives from the forward, for
    every input, with per-row positions (packed documents restart them) and a scale that is not 1."""
    from jaxbert.model.modernbert.attention import _rotary_qkv, rotary_qkv
    B, T, N, D = 2, 9, 3, 8
    H = N * D
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        x, kernel, b, gq, gk, gv = (jnp.asarray(rng.normal(size=shape)) for shape in
                                    [(B, T, H), (H, 3 * H), (3 * H,), (B, N, T, D), (B, N, T, D), (B, N, T, D)])
        b = b if bias else None
        cos, sin = rope_tables(jnp.asarray(rng.integers(0, 40, (B, T))), D, 10000.0, jnp.float64)
        outs, vjp = jax.vjp(lambda *a: rotary_qkv(*a, cos, sin, 0.3), x, kernel, b)
        want_outs, want_vjp = jax.vjp(lambda *a: _rotary_qkv(*a, cos, sin, 0.3), x, kernel, b)
        for got, want in zip(outs, want_outs):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        got, want = vjp((gq, gk, gv)), want_vjp((gq, gk, gv))
        for name, g, w in zip(("x", "kernel", "bias"), got, want):
            if w is None:
                assert g is None
                continue
            assert float(jnp.abs(w).max()) > 0.1, name
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-12, err_msg=name)


def test_rotary_qkv_backward_is_chosen_by_the_device_kind_compiled_for():
    """The written-out backward is traced where the step is compiled for a TPU other than a v4 (compiling_for,
    which the runners enter; outside it the default backend's kind, here a CPU, which runs Wqkv as rows with
    autodiff's backward): its custom_vjp (rotary_qkv) is in the jaxpr or not, and the gradients agree."""
    from types import SimpleNamespace

    from jaxbert.model.modernbert.attention import written_backward
    from jaxbert.model.options import compiling_for, target_kind
    assert not written_backward("TPU v4") and written_backward("TPU v5 lite") and written_backward("cpu")
    hf = tiny_hf("ModernBertForMaskedLM", seed=2)
    module = build("ModernBertForMaskedLM", config_of(hf), ModelOptions(attention_impl="blocked"))
    params = params_of(hf, "ModernBertForMaskedLM")
    ids = jnp.asarray(np.random.default_rng(0).integers(3, 100, (1, 24)), jnp.int32)
    runs = {}
    for kind in (None, "TPU v4", "TPU v5 lite"):
        loss = lambda p: module.apply({"params": p}, ids).logits.sum()  # a new function: jax caches traces by it
        with compiling_for([SimpleNamespace(device_kind=kind)] if kind else []):
            assert target_kind() == (kind or jax.devices()[0].device_kind)
            runs[kind] = ("name=rotary_qkv" in str(jax.make_jaxpr(loss)(params)), jax.grad(loss)(params))
    assert [runs[k][0] for k in (None, "TPU v4", "TPU v5 lite")] == [False, False, True]
    want = runs["TPU v4"][1]["model"]["layers"]["0"]["attn"]["Wqkv"]["kernel"]
    for kind in (None, "TPU v5 lite"):
        got = runs[kind][1]["model"]["layers"]["0"]["attn"]["Wqkv"]["kernel"]
        np.testing.assert_allclose(got, want, atol=2e-5 * float(np.abs(want).max()), rtol=0, err_msg=str(kind))
