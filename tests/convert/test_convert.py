"""HF -> jaxbert -> HF round trips on random tiny transformers models of every head."""

import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
import transformers
from flax.traverse_util import flatten_dict
from safetensors.numpy import load_file

import jaxbert
from jaxbert.model.options import ModelOptions
from jaxbert.convert import ConversionError, ConversionWarning, Table, params_to_state_dict, state_dict_to_params
from tests.helpers.hf_models import ALL_HEADS, jax_outputs, tiny_hf_model, tiny_inputs, torch_outputs
from tests.helpers.transformers4 import RELATIVE, transformers4


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _assert_same_files(src_dir, dst_dir):
    """Every tensor of src's model.safetensors is in dst's, with the same dtype and bytes."""
    a, b = load_file(f"{src_dir}/model.safetensors"), load_file(f"{dst_dir}/model.safetensors")
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(_bits(a[k]), _bits(b[k])), k


def _np_state_dict(model):
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", ALL_HEADS)
def test_every_head_round_trips_bit_for_bit_and_matches_logits(name, tmp_path):
    hf = tiny_hf_model(name, seed=ALL_HEADS.index(name))
    hf.save_pretrained(tmp_path / "hf")
    module, params = jaxbert.from_pretrained(tmp_path / "hf", strict=True)
    assert type(module).__name__ == name  # picked from config.json architectures
    inputs = tiny_inputs(name)
    np.testing.assert_allclose(jax_outputs(module, params, name, *inputs),
                               torch_outputs(hf, name, *inputs), atol=1e-5, rtol=0)

    jaxbert.save_pretrained(tmp_path / "out", module, params)
    _assert_same_files(tmp_path / "hf", tmp_path / "out")
    back, info = getattr(transformers, name).from_pretrained(tmp_path / "out", output_loading_info=True)
    assert list(info["missing_keys"]) == [] and list(info["unexpected_keys"]) == []  # sets in transformers 5
    ref, got = _np_state_dict(hf), _np_state_dict(back)
    assert sorted(ref) == sorted(got)
    for k in ref:  # includes the tied decoder weight/bias transformers re-ties on load
        assert np.array_equal(ref[k], got[k]), k

    hf.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    module, params = jaxbert.from_pretrained(tmp_path / "bf16", strict=True)
    jaxbert.save_pretrained(tmp_path / "out16", module, params)
    _assert_same_files(tmp_path / "bf16", tmp_path / "out16")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_checkpoints_keep_their_dtype_and_bits(dtype, tmp_path):
    hf = tiny_hf_model("BertForPreTraining", seed=3, dtype=dtype)
    hf.save_pretrained(tmp_path / "hf")
    expect = np.dtype(ml_dtypes.bfloat16 if dtype == torch.bfloat16 else np.float16)
    for scan in (False, True):
        module, params = jaxbert.from_pretrained(tmp_path / "hf", scan_layers=scan)
        assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {expect}
        assert module.options.param_dtype == expect
        jaxbert.save_pretrained(tmp_path / f"out{scan}", module, params)
        _assert_same_files(tmp_path / "hf", tmp_path / f"out{scan}")


def test_scanned_layout_converts_both_ways(tmp_path):
    hf = tiny_hf_model("BertForMaskedLM", seed=5)
    hf.save_pretrained(tmp_path / "hf")
    module, params = jaxbert.from_pretrained(tmp_path / "hf", scan_layers=True)
    assert module.options.scan_layers and jaxbert.is_scanned(params)
    q = params["bert"]["encoder"]["layer"]["attention"]["self"]["query"]["kernel"]
    assert q.shape == (2, 32, 32)  # [layers, in, out]
    w1 = hf.bert.encoder.layer[1].attention.self.query.weight.detach().numpy()
    assert np.array_equal(np.asarray(q[1]), w1.T)
    inputs = tiny_inputs("BertForMaskedLM")
    np.testing.assert_allclose(jax_outputs(module, params, "BertForMaskedLM", *inputs),
                               torch_outputs(hf, "BertForMaskedLM", *inputs), atol=1e-5, rtol=0)
    jaxbert.save_pretrained(tmp_path / "out", module, params)
    _assert_same_files(tmp_path / "hf", tmp_path / "out")


@transformers4(RELATIVE)
def test_relative_positions_cross_attention_and_untied_decoder(tmp_path):
    name = "BertLMHeadModel"
    hf = tiny_hf_model(name, seed=7, add_cross_attention=True, position_embedding_type="relative_key_query",
                       tie_word_embeddings=False)
    hf.save_pretrained(tmp_path / "hf")
    keys = load_file(f"{tmp_path}/hf/model.safetensors")
    assert "bert.encoder.layer.1.crossattention.self.query.weight" in keys
    assert "bert.encoder.layer.0.attention.self.distance_embedding.weight" in keys
    assert "cls.predictions.decoder.weight" in keys  # untied: its own weight
    for scan in (False, True):
        module, params = jaxbert.from_pretrained(tmp_path / "hf", strict=True, scan_layers=scan)
        head = params["cls"]["predictions"]
        assert np.array_equal(np.asarray(head["decoder"]["kernel"]),
                              hf.cls.predictions.decoder.weight.detach().numpy().T)
        ids, types, mask = tiny_inputs(name)
        enc = np.random.RandomState(1).randn(2, 5, 32).astype(np.float32)
        out = module.apply({"params": params}, jnp.asarray(ids), jnp.asarray(types),
                           attention_mask=jnp.asarray(mask), encoder_hidden_states=jnp.asarray(enc))
        with torch.no_grad():  # use_cache=False: with a cache object, transformers 4.57 gives every
            # query the last position's relative distances (modeling_bert.py, position_ids_l).
            ref = hf(torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask),
                     encoder_hidden_states=torch.tensor(enc), use_cache=False).logits.numpy()
        np.testing.assert_allclose(np.asarray(out.logits), ref, atol=1e-5, rtol=0)
        jaxbert.save_pretrained(tmp_path / f"out{scan}", module, params)
        _assert_same_files(tmp_path / "hf", tmp_path / f"out{scan}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back, info = transformers.BertLMHeadModel.from_pretrained(tmp_path / "outTrue", output_loading_info=True)
    assert list(info["missing_keys"]) == [] and list(info["unexpected_keys"]) == []  # sets in transformers 5
    assert torch.equal(back.cls.predictions.decoder.weight, hf.cls.predictions.decoder.weight)


def test_table_matches_the_model_param_tree_for_every_class_and_layout():
    base = jaxbert.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=37, max_position_embeddings=40, num_labels=3)
    variants = [(name, base, scan) for name in ALL_HEADS for scan in (False, True)]
    fancy = base.replace(add_cross_attention=True, position_embedding_type="relative_key",
                         tie_word_embeddings=False)
    variants += [(name, fancy, False) for name in ("BertModel", "BertForMaskedLM", "BertLMHeadModel")]
    for name, cfg, scan in variants:
        cfg = cfg.replace(is_decoder=True) if name == "BertLMHeadModel" else cfg
        module = jaxbert.MODEL_CLASSES[name](cfg, ModelOptions(scan_layers=scan))
        ids, types = jaxbert.dummy_inputs(name, 1, 4)
        kwargs = {"encoder_hidden_states": jnp.zeros((1, 3, 32))} if cfg.add_cross_attention else {}
        tree = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), ids, types, **kwargs))["params"]
        shapes = {path: leaf.shape for path, leaf in flatten_dict(tree).items()}
        assert shapes == Table(cfg, name, scan).leaf_shapes, (name, scan)


def test_state_dict_functions_invert_each_other():
    hf = tiny_hf_model("BertForPreTraining", seed=11)
    sd = hf.state_dict()  # torch tensors, with the tied decoder copies
    cfg = jaxbert.BertConfig.from_dict(hf.config.to_dict())
    params, report = state_dict_to_params(sd, cfg, "BertForPreTraining", strict=True)
    assert sorted(report.tied) == [("cls.predictions.decoder.bias", "cls.predictions.bias"),
                                   ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight")]
    back = params_to_state_dict(params, cfg, "BertForPreTraining", tied=True)
    assert sorted(back) == sorted(sd)
    for k, v in sd.items():
        assert np.array_equal(back[k], v.numpy()), k
    scanned, _ = state_dict_to_params(sd, cfg, "BertForPreTraining", scan_layers=True)
    back2 = params_to_state_dict(scanned, cfg, "BertForPreTraining")
    assert all(np.array_equal(back2[k], back[k]) for k in back2)


def test_conversion_streams_one_tensor_at_a_time():
    """Each streamed tensor is released before the next is read (bar one tied copy held
    until its target arrives), so peak memory is the params plus about one tensor."""
    import gc
    import weakref
    hf = tiny_hf_model("BertForMaskedLM", seed=12)
    cfg = jaxbert.BertConfig.from_dict(hf.config.to_dict())
    sd = {k: v.numpy().copy() for k, v in hf.state_dict().items()}
    order = ["cls.predictions.decoder.weight"] + [k for k in sd if k != "cls.predictions.decoder.weight"]
    alive, most = [], 0
    # gc.collect() below walks every object the process tracks (about half a million with torch and jax
    # loaded: 2 s a call, 44 calls); frozen ones are skipped. Nothing made before this line can hold a
    # streamed tensor, and the conversion's own objects (made after it) are still collected.
    gc.collect()
    gc.freeze()

    def stream():
        nonlocal most
        for k in order:
            gc.collect()
            most = max(most, sum(r() is not None for r in alive))
            array = sd.pop(k)
            alive.append(weakref.ref(array))
            yield k, array
            del array

    try:
        params, report = state_dict_to_params(stream(), cfg, "BertForMaskedLM", keys=order, strict=True)
    finally:
        gc.unfreeze()
    assert len(report.loaded) == len(order) - 2 and len(report.tied) == 2
    assert most == 1  # only the early decoder.weight, waiting for the word embeddings


def test_listed_key_that_never_arrives_is_an_error():
    hf = tiny_hf_model("BertModel", seed=13)
    cfg = jaxbert.BertConfig.from_dict(hf.config.to_dict())
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    stream = ((k, v) for k, v in sd.items() if k != "pooler.dense.bias")
    with pytest.raises(ConversionError, match=r"listed but never read .*\['pooler.dense.bias'\]"):
        state_dict_to_params(stream, cfg, "BertModel", keys=list(sd))


def test_dtype_argument_casts(tmp_path):
    hf = tiny_hf_model("BertForMaskedLM", seed=2)
    hf.save_pretrained(tmp_path / "hf")
    module, params = jaxbert.from_pretrained(tmp_path / "hf", dtype="bf16")
    emb = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert emb.dtype == jnp.bfloat16 and module.options.param_dtype == jnp.bfloat16
    ref = hf.bert.embeddings.word_embeddings.weight.detach().to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(np.asarray(emb).view(np.int16), ref)  # same rounding as torch


def _load_as_masked_lm_with_warning(tmp_path, arch: str, seed: int, match: str):
    """Save a tiny transformers `arch`, load it as BertForMaskedLM expecting a warning matching `match`."""
    hf = tiny_hf_model(arch, seed=seed)
    path = tmp_path / arch
    hf.save_pretrained(path)
    with pytest.warns(ConversionWarning, match=match):
        module, params, report = jaxbert.from_pretrained(path, "BertForMaskedLM", return_report=True)
    return hf, path, module, params, report


def test_base_checkpoint_into_head_initialises_head_with_warning_and_strict_refuses(tmp_path):
    hf, path, module, params, report = _load_as_masked_lm_with_warning(
        tmp_path, "BertModel", 4, "cls/predictions/transform/dense/kernel")
    assert set(report.missing_paths) == {
        "cls/predictions/bias", "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/scale", "cls/predictions/transform/LayerNorm/bias"}
    assert report.unused_keys == ["pooler.dense.bias", "pooler.dense.weight"]
    kernel = np.asarray(params["cls"]["predictions"]["transform"]["dense"]["kernel"])
    assert 0.01 < kernel.std() < 0.03  # normal(initializer_range=0.02), not zeros
    got = params["bert"]["encoder"]["layer"]["1"]["output"]["dense"]["kernel"]
    assert np.array_equal(np.asarray(got), hf.encoder.layer[1].output.dense.weight.detach().numpy().T)
    with pytest.raises(ConversionError, match="missing cls.predictions.bias"):
        jaxbert.from_pretrained(path, "BertForMaskedLM", strict=True)


def test_pretraining_checkpoint_into_masked_lm_reports_unused_and_matches_transformers(tmp_path):
    hf, path, module, params, report = _load_as_masked_lm_with_warning(
        tmp_path, "BertForPreTraining", 6, "cls.seq_relationship.weight")
    assert dict(report.unused) == {
        "bert.pooler.dense.bias": "BertForMaskedLM has no pooler",
        "bert.pooler.dense.weight": "BertForMaskedLM has no pooler",
        "cls.seq_relationship.bias": "no BertForMaskedLM param for it",
        "cls.seq_relationship.weight": "no BertForMaskedLM param for it"}
    assert report.missing == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlm = transformers.BertForMaskedLM.from_pretrained(path).eval()
    inputs = tiny_inputs("BertForMaskedLM")
    np.testing.assert_allclose(jax_outputs(module, params, "BertForMaskedLM", *inputs),
                               torch_outputs(mlm, "BertForMaskedLM", *inputs), atol=1e-5, rtol=0)


def test_head_checkpoint_into_base_model_strips_prefix():
    hf = tiny_hf_model("BertForMaskedLM", seed=8)
    cfg = jaxbert.BertConfig.from_dict(hf.config.to_dict())
    params, report = state_dict_to_params(hf.state_dict(), cfg, "BertModel")
    assert set(params) == {"embeddings", "encoder", "pooler"}
    assert report.missing_paths == ["pooler/dense/kernel", "pooler/dense/bias"]
    assert {k for k in report.unused_keys} >= {"cls.predictions.bias", "cls.predictions.decoder.weight"}
    assert np.array_equal(params["embeddings"]["word_embeddings"]["embedding"],
                          hf.bert.embeddings.word_embeddings.weight.detach().numpy())


def test_legacy_names_buffers_and_tied_checks():
    hf = tiny_hf_model("BertForMaskedLM", seed=9)
    cfg = jaxbert.BertConfig.from_dict(hf.config.to_dict())
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    legacy = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
              for k, v in sd.items()}
    legacy["bert.embeddings.position_ids"] = np.arange(40)[None]
    params, report = state_dict_to_params(legacy, cfg, "BertForMaskedLM", strict=True)
    assert report.ignored == [("bert.embeddings.position_ids", "buffer, recomputed by the model")]
    assert np.array_equal(params["bert"]["embeddings"]["LayerNorm"]["scale"],
                          sd["bert.embeddings.LayerNorm.weight"])
    bad = dict(sd)
    bad["cls.predictions.decoder.weight"] = sd["cls.predictions.decoder.weight"] + 1
    with pytest.raises(ConversionError, match="decoder.weight is tied to bert.embeddings.word_embeddings.weight"):
        state_dict_to_params(bad, cfg, "BertForMaskedLM")
    bad = dict(sd)
    bad["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"] * 2
    with pytest.raises(ConversionError, match="decoder.bias is tied to cls.predictions.bias"):
        state_dict_to_params(bad, cfg, "BertForMaskedLM")
    # Only the decoder copy present (some exporters keep that one): it fills the bias.
    only = {k: v for k, v in sd.items() if k != "cls.predictions.bias"}
    params, _ = state_dict_to_params(only, cfg, "BertForMaskedLM", strict=True)
    assert np.array_equal(params["cls"]["predictions"]["bias"], sd["cls.predictions.bias"])


def test_shape_mismatch_is_an_error_naming_every_key():
    hf = tiny_hf_model("BertForMaskedLM", seed=10)
    cfg = jaxbert.BertConfig.from_dict(hf.config.to_dict()).replace(vocab_size=120)
    with pytest.raises(ConversionError) as err:
        state_dict_to_params(hf.state_dict(), cfg, "BertForMaskedLM")
    msg = str(err.value)
    assert "bert.embeddings.word_embeddings.weight: checkpoint [99, 32], BertForMaskedLM expects [120, 32]" in msg
    assert "cls.predictions.bias: checkpoint [99], BertForMaskedLM expects [120]" in msg
