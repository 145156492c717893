"""EuroBERT against transformers 5: every class and every classifier_pooling, eager and sdpa attention, grouped
key/value heads, padded batches; float32 within 1e-5 and float64 within 1e-10 at every hidden state and every
head output. Then jaxbert's own options (scanned layers, remat, feed-forward chunks, dot_product and the fused
blocked attention, attention and feed-forward chunks, packed documents, the chunked vocabulary loss's factors) give the same outputs; the init
follows transformers'; configs jaxbert cannot honour are refused by name; the released sizes count
transformers' parameters."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers.models.eurobert", reason="EuroBERT is in transformers >= 5 (README's test command installs it)")
import torch  # noqa: E402
import transformers  # noqa: E402

from jaxbert.model.configs import ConfigError  # noqa: E402
from jaxbert.model.eurobert import EuroBertConfig, build  # noqa: E402
from jaxbert.model.eurobert.table import Table, param_count  # noqa: E402
from jaxbert.model.options import ModelOptions  # noqa: E402
from jaxbert.model.vocab_loss import VocabProjection, deferred_vocab_logits  # noqa: E402
from jaxbert.parity.grad import float64_reference  # noqa: E402
from tests.helpers.eurobert import CLASSES, LENGTH, TINY, config_of, padded_inputs, params_of, tiny_hf  # noqa: E402

HEAD_OUTPUTS = ("logits",)


def _run_hf(hf, ids, mask, attn, **kw):
    hf.set_attn_implementation(attn)
    with torch.no_grad():
        return hf(torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True, **kw)


def _run_jax(module, params, ids, mask, **kw):
    apply = jax.jit(lambda p, i, m: module.apply({"params": p}, i, attention_mask=m, output_hidden_states=True, **kw))
    return apply(params, jnp.asarray(ids), jnp.asarray(mask))


def _max_errors(hf_out, jax_out, real) -> dict:
    """Largest |difference| per stage at real tokens: every hidden state (the embeddings, layers 1 .. L - 1, the
    final norm: transformers 5's hidden_states), the head's output."""
    errors = {}
    assert len(hf_out.hidden_states) == len(jax_out.hidden_states) == TINY["num_hidden_layers"] + 1
    for i, (a, b) in enumerate(zip(hf_out.hidden_states, jax_out.hidden_states)):
        errors[f"hidden {i}"] = float(np.abs(a.numpy() - np.asarray(b))[real].max())
    for name in HEAD_OUTPUTS + ("last_hidden_state",):
        a = getattr(hf_out, name, None)
        if a is not None:
            b = np.asarray(getattr(jax_out, name))
            assert a.shape == b.shape, name
            d = np.abs(a.numpy() - b)
            errors[name] = float((d[real] if d.ndim == 3 else d).max())
    return errors


CASES = [(c, "late") for c in CLASSES] + [("EuroBertForSequenceClassification", p) for p in ("bos", "mean")]


@pytest.mark.parametrize("name,pooling", CASES)
def test_every_class_and_pooling_matches_transformers_eager_and_sdpa_in_float32(name, pooling):
    hf = tiny_hf(name, seed=CASES.index((name, pooling)), classifier_pooling=pooling)
    ids, mask = padded_inputs()
    out = _run_jax(build(name, config_of(hf)), params_of(hf, name), ids, mask)
    for attn in ("eager", "sdpa"):
        errors = _max_errors(_run_hf(hf, ids, mask, attn), out, mask.astype(bool))
        assert max(errors.values()) < 1e-5, (attn, errors)
        assert "logits" in errors or name == "EuroBertModel"


@pytest.mark.parametrize("scan", [False, True])
def test_biases_a_tied_lm_head_and_another_activation_match_transformers(scan):
    """attention_bias and mlp_bias (lm_head then has a bias too), the lm_head tied to embed_tokens, plain
    multi-head attention (num_key_value_heads = num_attention_heads), gelu for silu, a head_dim that is not
    hidden_size / num_attention_heads."""
    name = "EuroBertForMaskedLM"
    hf = tiny_hf(name, seed=31, attention_bias=True, mlp_bias=True, tie_word_embeddings=True, num_key_value_heads=4,
                 hidden_act="gelu", head_dim=12)
    config = config_of(hf)
    assert config.tie_word_embeddings and config.groups == 1 and config.head_dim == 12
    params = params_of(hf, name, scan)
    assert set(params["lm_head"]) == {"bias"}  # the weight is embed_tokens
    ids, mask = padded_inputs()
    out = _run_jax(build(name, config, ModelOptions(scan_layers=scan)), params, ids, mask)
    errors = _max_errors(_run_hf(hf, ids, mask, "sdpa"), out, mask.astype(bool))
    assert max(errors.values()) < 1e-5, errors


@pytest.mark.parametrize("name,pooling", [("EuroBertForMaskedLM", "late"), ("EuroBertForSequenceClassification", "bos"),
                                          ("EuroBertForSequenceClassification", "mean"),
                                          ("EuroBertForSequenceClassification", "late"),
                                          ("EuroBertForTokenClassification", "late")])
def test_float64_matches_transformers_sdpa_within_1e_10(name, pooling):
    """transformers' RMSNorm and RoPE tables stay float32 in a float64 model; parity's float64_reference
    (the family's hook for the norms, float64_rotary for the tables) makes them float64, as jaxbert's are.
    Without it the same comparison is float32-exact only."""
    ids, mask = padded_inputs()
    with jax.enable_x64(True):
        hf = tiny_hf(name, seed=7, classifier_pooling=pooling).double()
        module = build(name, config_of(hf), ModelOptions(dtype=jnp.float64, param_dtype=jnp.float64))
        out = _run_jax(module, params_of(hf, name, dtype=np.float64), ids, mask)
        assert out.hidden_states[-1].dtype == jnp.float64
        as_is = max(_max_errors(_run_hf(hf, ids, mask, "sdpa"), out, mask.astype(bool)).values())
        float64_reference(hf)
        errors = _max_errors(_run_hf(hf, ids, mask, "sdpa"), out, mask.astype(bool))
        assert max(errors.values()) <= 1e-10, errors
        assert as_is > 1e-9  # transformers' own float64 model: float32 norms and tables


def test_the_rope_theta_and_the_head_grouping_matter():
    """The checks above would not notice a wrong theta or a wrong pairing of query and key/value heads if the
    inputs never reached them: another theta, or k_proj's two heads swapped, move the logits by far more."""
    name = "EuroBertForMaskedLM"
    hf = tiny_hf(name, seed=3)
    ids, mask = padded_inputs()
    params = params_of(hf, name)
    ref = np.asarray(_run_jax(build(name, config_of(hf)), params, ids, mask).logits)
    other = config_of(hf).replace(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    assert np.abs(np.asarray(_run_jax(build(name, other), params, ids, mask).logits) - ref).max() > 1e-3
    swapped = jax.tree_util.tree_map(np.array, params)
    for i in range(TINY["num_hidden_layers"]):
        k = swapped["model"]["layers"][str(i)]["self_attn"]["k_proj"]["kernel"]
        k[:] = np.concatenate([k[:, 8:], k[:, :8]], axis=1)  # [H, 2 x 8]: head 0 <-> head 1
    moved = np.asarray(_run_jax(build(name, config_of(hf)), swapped, ids, mask).logits)
    assert np.abs(moved - ref).max() > 1e-3


def test_attention_probabilities_match_transformers_eager():
    name = "EuroBertModel"
    hf = tiny_hf(name, seed=23)
    ids, mask = padded_inputs()
    ref = _run_hf(hf, ids, mask, "eager", output_attentions=True)
    module, params = build(name, config_of(hf)), params_of(hf, name)
    out = _run_jax(module, params, ids, mask, output_attentions=True)
    assert len(out.attentions) == 3 and out.attentions[0].shape == (3, 4, LENGTH, LENGTH)
    for a, b in zip(ref.attentions, out.attentions):
        np.testing.assert_allclose(np.asarray(b), a.numpy(), atol=1e-5, rtol=0)
    # far from uniform: the scaled-up q and k make the scores O(1)
    assert float(np.asarray(out.attentions[1])[0].max()) > 0.3


# ---- jaxbert's options ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlm_reference():
    """A tiny MLM and its plain (unscanned, einsum, no remat) outputs, shared by the option tests."""
    name = "EuroBertForMaskedLM"
    hf = tiny_hf(name, seed=13)
    ids, mask = padded_inputs()
    return hf, _run_jax(build(name, config_of(hf)), params_of(hf, name), ids, mask)


@pytest.mark.parametrize("options", [
    ModelOptions(scan_layers=True),
    ModelOptions(scan_layers=True, remat_policy="full", ffn_chunks=3),
    ModelOptions(remat_policy="dots", attention_chunks=2, ffn_chunks=2),
    ModelOptions(attention_impl="dot_product"),
    ModelOptions(attention_impl="blocked"),
    ModelOptions(attention_impl="blocked", scan_layers=True, remat_policy="keep_attention"),
], ids=["scan", "scan-remat-chunks", "remat-chunks", "dot_product", "blocked", "blocked-scan"])
def test_options_give_the_same_outputs(options, mlm_reference):
    """Real positions agree (within float32 rounding); padded queries are computed otherwise on the fused paths
    (they attend only to padding there), outputs nobody reads."""
    name = "EuroBertForMaskedLM"
    hf, ref = mlm_reference
    ids, mask = padded_inputs()
    got = _run_jax(build(name, config_of(hf), options), params_of(hf, name, scan_layers=options.scan_layers), ids, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(got.logits)[real], np.asarray(ref.logits)[real], atol=2e-6, rtol=0)
    assert len(got.hidden_states) == len(ref.hidden_states) == 4
    for a, b in zip(ref.hidden_states, got.hidden_states):  # the scanned stack's per-layer states, in order
        np.testing.assert_allclose(np.asarray(b)[real], np.asarray(a)[real], atol=2e-6, rtol=0)


def test_packed_documents_compute_as_separate_rows():
    """Two documents packed in one row with segment_ids (and padding after them) give each document's
    outputs as if it were a row alone: attention within the document, RoPE positions from 0 at its start,
    on the einsum and the blocked paths."""
    name = "EuroBertForTokenClassification"
    hf = tiny_hf(name, seed=17)
    params = params_of(hf, name)
    rng = np.random.RandomState(1)
    a, b = rng.randint(4, 100, 9), rng.randint(4, 100, 11)
    packed = np.zeros((1, 24), np.int64)
    packed[0, :9], packed[0, 9:20] = a, b
    segments = np.array([[1] * 9 + [2] * 11 + [0] * 4])
    mask = (segments > 0).astype(np.int64)
    for impl in ("einsum", "blocked"):
        module = build(name, config_of(hf), ModelOptions(attention_impl=impl))
        got = np.asarray(jax.jit(lambda p, i, m, s, module=module: module.apply(
            {"params": p}, i, attention_mask=m, segment_ids=s).logits)(params, packed, mask, segments))
        for doc, start in ((a, 0), (b, 9)):
            alone = _run_jax(module, params, doc[None], np.ones((1, len(doc)), np.int64)).logits
            np.testing.assert_allclose(got[0, start:start + len(doc)], np.asarray(alone)[0], atol=2e-6, rtol=0,
                                       err_msg=impl)


def test_masked_positions_and_the_chunked_loss_factors_give_the_logits_there(mlm_reference):
    """masked_positions [B, M]: the logits at those positions; under deferred_vocab_logits with a vocabulary
    chunk the head returns its factors (VocabProjection: the final states, lm_head's kernel or the tied table,
    the bias), whose product is the same logits, untied and tied."""
    name = "EuroBertForMaskedLM"
    hf, ref = mlm_reference
    ids, mask = padded_inputs()
    positions = np.array([[0, 5, 23], [1, 1, 16], [8, 2, 3]], np.int32)
    want = np.take_along_axis(np.asarray(ref.logits), positions[..., None], axis=1)
    for config in (config_of(hf), config_of(hf).replace(tie_word_embeddings=True, mlp_bias=True)):
        module = build(name, config, ModelOptions(vocab_loss_chunk=32))
        apply = lambda p, m=module: m.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask),  # noqa: E731
                                            masked_positions=positions).logits
        if config.tie_word_embeddings:  # the table is embed_tokens; lm_head holds a bias (random here), no weight
            params = jax.tree_util.tree_map(np.array, module.init(jax.random.PRNGKey(1), jnp.asarray(ids))["params"])
            assert set(params["lm_head"]) == {"bias"}
            params["lm_head"]["bias"] = np.random.RandomState(0).normal(size=100).astype(np.float32)
            want = np.asarray(jax.jit(apply)(params))
        else:
            params = params_of(hf, name)
            np.testing.assert_allclose(np.asarray(jax.jit(apply)(params)), want, atol=2e-6, rtol=0)
        with deferred_vocab_logits():  # traced afresh (not jit's cached trace): the head reads the context then
            factors = apply(params)
        assert isinstance(factors, VocabProjection) and factors.chunk == 32 and factors.columns != config.tie_word_embeddings
        np.testing.assert_allclose(np.asarray(factors.logits()), want, atol=2e-6, rtol=0)


def test_scanned_remat_gradients_equal_unscanned():
    name = "EuroBertForSequenceClassification"
    hf = tiny_hf(name, seed=17)
    ids, mask = padded_inputs()
    grads = []
    for scan in (False, True):
        module = build(name, config_of(hf), ModelOptions(scan_layers=scan, remat_policy="full" if scan else "none"))

        def loss(p, module=module):
            return module.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask)).logits.sum()
        g = jax.jit(jax.grad(loss))(params_of(hf, name, scan_layers=scan))["model"]["layers"]
        grads.append(g["1"]["self_attn"]["k_proj"]["kernel"] if not scan else g["self_attn"]["k_proj"]["kernel"][1])
    np.testing.assert_allclose(grads[1], grads[0], atol=1e-6, rtol=1e-5)
    assert float(jnp.abs(grads[0]).max()) > 1e-3


def test_attention_dropout_acts_and_the_embedding_pad_row_gets_no_gradient():
    name = "EuroBertForMaskedLM"
    hf = tiny_hf(name, seed=19)
    config = config_of(hf).replace(attention_dropout=0.2)
    ids, mask = padded_inputs()
    params = params_of(hf, name)
    module = build(name, config, ModelOptions(attention_impl="blocked"))  # dropout needs the probabilities: einsum

    def loss(p, deterministic):
        return module.apply({"params": p}, jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                            deterministic=deterministic, rngs={"dropout": jax.random.PRNGKey(0)}).logits.sum()
    quiet, dropped = jax.jit(loss, static_argnums=1)(params, True), jax.jit(loss, static_argnums=1)(params, False)
    assert abs(float(dropped - quiet)) > 1e-3
    grad = jax.jit(jax.grad(loss), static_argnums=1)(params, False)["model"]["embed_tokens"]["embedding"]
    assert float(jnp.abs(grad[TINY["pad_token_id"]]).max()) == 0 and float(jnp.abs(grad[ids[0, 0]]).max()) > 0


def test_bf16_runs_close():
    name = "EuroBertModel"
    hf = tiny_hf(name, seed=23)
    ids, mask = padded_inputs()
    ref = _run_hf(hf, ids, mask, "sdpa").last_hidden_state.numpy()
    low = _run_jax(build(name, config_of(hf), ModelOptions(dtype=jnp.bfloat16)), params_of(hf, name), ids,
                   mask).last_hidden_state
    assert low.dtype == jnp.bfloat16
    err = np.abs(np.asarray(low, np.float32) - ref)[mask.astype(bool)]
    assert err.max() < 0.25 and err.mean() < 0.03, (err.max(), err.mean())


def test_options_it_cannot_honour_are_refused_by_name():
    config = EuroBertConfig(**TINY)
    with pytest.raises(ValueError, match="decode=True"):
        build("EuroBertModel", config, ModelOptions(decode=True))
    with pytest.raises(ValueError, match="'BertForMaskedLM' is not a EuroBERT class"):
        build("BertForMaskedLM", config)
    with pytest.raises(ValueError, match="takes no add_pooling_layer"):
        build("EuroBertModel", config, add_pooling_layer=False)
    with pytest.raises(ValueError, match="head_mask"):
        jax.eval_shape(build("EuroBertModel", config).init, jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32),
                       head_mask=jnp.ones((4,)))


def test_init_follows_transformers():
    """normal(initializer_range) for every Linear and the embeddings (their padding row zero), zero biases,
    RMSNorm weights one."""
    config = EuroBertConfig(**dict(TINY, hidden_size=128, intermediate_size=256, num_labels=5, initializer_range=0.05,
                                   mlp_bias=True))
    params = jax.jit(build("EuroBertForSequenceClassification", config).init)(
        jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    layer = params["model"]["layers"]["1"]
    for role, w in {"q_proj": layer["self_attn"]["q_proj"]["kernel"], "down_proj": layer["mlp"]["down_proj"]["kernel"],
                    "embed_tokens": params["model"]["embed_tokens"]["embedding"][1:],
                    "dense": params["dense"]["kernel"]}.items():
        assert abs(float(np.asarray(w).std()) / 0.05 - 1) < 0.05, role
    assert np.all(np.asarray(params["model"]["embed_tokens"]["embedding"][0]) == 0)
    assert np.all(np.asarray(layer["input_layernorm"]["scale"]) == 1) and set(layer["input_layernorm"]) == {"scale"}
    assert np.all(np.asarray(layer["mlp"]["gate_proj"]["bias"]) == 0) and "bias" not in layer["self_attn"]["q_proj"]
    assert params["classifier"]["kernel"].shape == (128, 5)


# ---- config ---------------------------------------------------------------------------------

def test_config_reads_every_transformers_field_and_round_trips():
    hf = transformers.EuroBertConfig(**TINY, classifier_pooling="mean", num_labels=4, problem_type="regression")
    data = json.loads(hf.to_json_string())  # as config.json holds it
    data["something_new"] = {"kept": True}
    config = EuroBertConfig.from_dict(data)
    assert (config.classifier_pooling, config.num_labels, config.problem_type) == ("mean", 4, "regression")
    assert (config.theta, config.groups, config.head_dim) == (250000.0, 2, 8)
    back = config.to_dict()
    for key, value in data.items():
        assert back[key] == value, key
    assert EuroBertConfig.from_dict(back) == config
    # transformers' defaults are jaxbert's: EuroBERT-210m's shape, theta 10,000 when none is named
    assert {k: v for k, v in EuroBertConfig().to_dict().items() if k in (d := transformers.EuroBertConfig().to_dict())} \
        == {k: v for k, v in d.items() if k in EuroBertConfig().to_dict() and k not in ("id2label", "label2id")} \
        | {"id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "label2id": {"LABEL_0": 0, "LABEL_1": 1}}


def test_config_reads_the_released_checkpoints_spelling():
    """The checkpoints released before transformers 5 spell `rope_theta` at the top (and `clf_pooling`, which
    transformers 5 ignores too): the same theta, kept as it came, and rope_parameters written beside it."""
    data = {k: v for k, v in TINY.items() if k != "rope_parameters"}
    data.update(model_type="eurobert", rope_theta=250000, rope_scaling=None, clf_pooling="late")
    config = EuroBertConfig.from_dict(data)
    assert config.theta == 250000.0 and config.extra["clf_pooling"] == "late"
    back = config.to_dict()
    assert back["rope_theta"] == 250000 and back["rope_parameters"] == {"rope_type": "default", "rope_theta": 250000.0}
    assert transformers.EuroBertConfig.from_dict(back).rope_parameters["rope_theta"] == 250000.0
    assert EuroBertConfig.from_dict({k: v for k, v in data.items() if k != "rope_theta"}).theta == 10000.0


@pytest.mark.parametrize("change,message", [
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}),
     "rope_parameters rope_type 'yarn' is not supported"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling .* is not supported"),
    (dict(rope_theta=5.0), "rope_theta 5.0 disagrees with rope_parameters.rope_theta 250000.0"),
    (dict(num_key_value_heads=3), "num_attention_heads \\(4\\) must be a multiple of num_key_value_heads \\(3\\)"),
    (dict(head_dim=7), "head_dim 7 must be even"),
    (dict(hidden_act="swiglu"), "hidden_act 'swiglu' is unknown"),
    (dict(classifier_pooling="cls"), "classifier_pooling 'cls' is unknown"),
    (dict(mask_token_id=100), "mask_token_id 100 is outside the vocabulary"),
    (dict(eos_token_id="2"), "eos_token_id must be an integer or a list of integers"),
    (dict(mlp_bias="false"), "mlp_bias must be true or false, got 'false'"),
    (dict(architectures=["EuroBertForQuestionAnswering"]), "not a EuroBERT class"),
    (dict(model_type="modernbert"), "model_type 'modernbert' is not a EuroBERT config"),
])
def test_configs_jaxbert_cannot_honour_are_refused_by_name(change, message):
    with pytest.raises(ConfigError, match=message):
        EuroBertConfig.from_dict(dict(TINY, **change))


# ---- released shapes ---------------------------------------------------------------------------

SHAPES = {  # the EuroBERT training library's (Optimus) sizes; transformers' 128,256-token vocabulary
    "210m": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12),
    "610m": dict(hidden_size=1152, intermediate_size=4096, num_hidden_layers=26, num_attention_heads=18,
                 num_key_value_heads=6),
    "2.1b": dict(hidden_size=2304, intermediate_size=6144, num_hidden_layers=32, num_attention_heads=18,
                 num_key_value_heads=6),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_released_shapes_build_abstractly_with_transformers_param_counts(shape):
    name = "EuroBertForMaskedLM"
    config = EuroBertConfig(**SHAPES[shape])
    for scan in (False, True):
        module = build(name, config, ModelOptions(scan_layers=scan, param_dtype=jnp.bfloat16))
        abstract = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32)))
        count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(abstract["params"]))
        flat = {tuple(k.key for k in path): leaf.shape for path, leaf in
                jax.tree_util.tree_flatten_with_path(abstract["params"])[0]}
        assert flat == Table(config, name, scan).leaf_shapes, shape
    with torch.device("meta"):
        hf = transformers.EuroBertForMaskedLM(transformers.EuroBertConfig(**SHAPES[shape]))
    assert count == param_count(config, name) == sum(p.numel() for p in hf.parameters())
