"""ModernBERT through the converter: HF -> jaxbert -> HF bit for bit (transformers reloads the export
and gives the same logits), jaxbert params -> state dict -> params bit for bit in both layouts,
strict key accounting, the class picked from ``architectures``, cross-family loads refused by
name, ``jaxbert convert`` both ways with the tokenizer carried, and 5.x-spelled configs.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

import jaxbert
from jaxbert.cli.main import main
from jaxbert.convert import ConversionError, params_to_state_dict, state_dict_to_params
from jaxbert.model.modernbert import ModernBertConfig, build, dummy_inputs
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten
from tests.helpers.hf_models import tiny_hf_model
from tests.helpers.modernbert import TINY, padded_inputs, tiny_hf


def _bytes_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k


def _real(x, mask):
    """A per-token output at the real tokens only (a per-sequence one whole). A padded query whose sliding
    window holds no real key has no defined output: transformers 5's sdpa path gives it 0, its eager path
    (and 4.x's both) the mean of every value, as jaxbert does; no real token, pooled vector or loss reads it."""
    x, mask = np.asarray(x), np.asarray(mask).astype(bool)
    return x[mask] if x.shape[:mask.ndim] == mask.shape else x


def _hf_logits(model, name, ids, mask):
    with torch.no_grad():
        out = model(torch.tensor(ids), attention_mask=torch.tensor(mask))
    return out.last_hidden_state if name == "ModernBertModel" else (
        torch.stack([out.start_logits, out.end_logits], -1) if name.endswith("Answering") else out.logits)


@pytest.mark.parametrize("name,scan", [("ModernBertForMaskedLM", True), ("ModernBertModel", False),
                                       ("ModernBertForQuestionAnswering", True),
                                       ("ModernBertForMultipleChoice", False)])
def test_hf_to_jaxbert_to_hf_is_bit_exact_and_transformers_reloads_it(name, scan, tmp_path):
    hf = tiny_hf(name, seed=1, attn="sdpa")
    hf.save_pretrained(tmp_path / "hf")
    module, params, report = jaxbert.from_pretrained(tmp_path / "hf", scan_layers=scan, strict=True,
                                                     return_report=True)
    assert type(module).__name__ == name  # from config.json's architectures
    assert not report.missing and not report.unused
    assert ("scan" in params["model"]["layers"] if scan else "2" in params["model"]["layers"]) \
        if name != "ModernBertModel" else "0" in params["layers"]
    if name == "ModernBertForMaskedLM":
        assert set(params["decoder"]) == {"bias"}  # the weight is tok_embeddings

    jaxbert.save_pretrained(tmp_path / "back", module, params)
    _bytes_equal(load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors"))
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "modernbert"

    # transformers loads the export as it loads the original (compared loaded with loaded: an in-memory
    # model and a loaded one can differ in the last bit on CPU, their buffers being laid out differently).
    load = lambda folder: getattr(transformers, name).from_pretrained(  # noqa: E731
        tmp_path / folder, attn_implementation="sdpa").eval()
    ids, mask = padded_inputs(name)
    assert torch.equal(_hf_logits(load("back"), name, ids, mask), _hf_logits(load("hf"), name, ids, mask))
    ours = jax.jit(module.apply)({"params": params}, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    ours = ours.last_hidden_state if name == "ModernBertModel" else (
        jnp.stack([ours.start_logits, ours.end_logits], -1) if name.endswith("Answering") else ours.logits)
    np.testing.assert_allclose(_real(ours, mask), _real(_hf_logits(hf, name, ids, mask).numpy(), mask),
                               atol=1e-5, rtol=0)


BIASED = dict(TINY, norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True, num_labels=3)


@pytest.mark.parametrize("name,config", [
    ("ModernBertForMaskedLM", dict(BIASED, tie_word_embeddings=False)),
    ("ModernBertForMaskedLM", dict(TINY, decoder_bias=False)),
    ("ModernBertForSequenceClassification", BIASED),
    ("ModernBertForTokenClassification", TINY),
], ids=["mlm-untied-biased", "mlm-no-decoder-bias", "seq-biased", "token"])
def test_jaxbert_to_state_dict_to_jaxbert_is_bit_exact_in_both_layouts(name, config):
    config = ModernBertConfig(**config)
    module = build(name, config)
    params = jax.tree_util.tree_map(np.asarray, jax.jit(module.init)(jax.random.PRNGKey(3), dummy_inputs(name)[0]))
    params = params["params"]
    sd = params_to_state_dict(params, config, name)
    hf = getattr(transformers, name)(transformers.ModernBertConfig(**config.to_dict()))
    tied = {"decoder.weight"} if config.tie_word_embeddings and name.endswith("MaskedLM") else set()
    assert set(sd) == set(hf.state_dict()) - tied  # transformers' keys; the tied weight left out as it saves
    for key in sd:
        assert tuple(sd[key].shape) == tuple(hf.state_dict()[key].shape), key
    back, _ = state_dict_to_params(sd, config, name, strict=True)
    a, b = flatten(params), flatten(back)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k
    # The scanned layout: layers 1..L-1 stacked under layers/scan, layer 0 apart; the same tensors back.
    scanned, _ = state_dict_to_params(sd, config, name, scan_layers=True, strict=True)
    layers = scanned["model"]["layers"]
    assert set(layers) == {"0", "scan"} and layers["scan"]["attn"]["Wqkv"]["kernel"].shape == (2, 32, 96)
    np.testing.assert_array_equal(layers["scan"]["mlp"]["Wo"]["kernel"][1],
                                  params["model"]["layers"]["2"]["mlp"]["Wo"]["kernel"])
    _bytes_equal(sd, params_to_state_dict(scanned, config, name))
    shapes = jax.eval_shape(build(name, config, ModelOptions(scan_layers=True)).init, jax.random.PRNGKey(0),
                            dummy_inputs(name)[0])["params"]
    assert jax.tree_util.tree_map(lambda x: x.shape, shapes) == jax.tree_util.tree_map(np.shape, scanned)


def test_strict_loading_names_the_missing_and_the_extra_key(tmp_path):
    name = "ModernBertForSequenceClassification"
    hf = tiny_hf(name, seed=2)
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    config = ModernBertConfig.from_dict(hf.config.to_dict())
    missing = dict(sd)
    del missing["model.layers.1.attn_norm.weight"]
    with pytest.raises(ConversionError, match="missing model.layers.1.attn_norm.weight -> "
                                              "model/layers/1/attn_norm/scale \\[32\\]"):
        state_dict_to_params(missing, config, name, strict=True)
    extra = dict(sd, **{"model.layers.0.attn_norm.weight": sd["model.final_norm.weight"]})
    with pytest.raises(ConversionError, match="unused model.layers.0.attn_norm.weight: no "
                                              "ModernBertForSequenceClassification param for it"):
        state_dict_to_params(extra, config, name, strict=True)
    wrong = dict(sd, **{"model.layers.2.mlp.Wi.weight": np.zeros((80, 31), np.float32)})
    with pytest.raises(ConversionError, match="model.layers.2.mlp.Wi.weight: checkpoint \\[80, 31\\], "
                                              "ModernBertForSequenceClassification expects \\[80, 32\\]"):
        state_dict_to_params(wrong, config, name)
    # Not strict: the missing norm is initialised as init makes it (ones) and reported.
    params, report = state_dict_to_params(missing, config, name)
    assert [p for p, _ in report.missing] == [("model", "layers", "1", "attn_norm", "scale")]
    assert np.all(params["model"]["layers"]["1"]["attn_norm"]["scale"] == 1)


def test_a_tied_decoder_that_differs_is_refused(tmp_path):
    name = "ModernBertForMaskedLM"
    hf = tiny_hf(name, seed=4)
    sd = {k: v.numpy().copy() for k, v in hf.state_dict().items()}
    sd["decoder.weight"] = sd["decoder.weight"] + 1
    with pytest.raises(ConversionError, match="decoder.weight is tied to model.embeddings.tok_embeddings.weight"):
        state_dict_to_params(sd, ModernBertConfig.from_dict(hf.config.to_dict()), name)


def test_a_checkpoint_of_one_family_into_the_other_is_refused_naming_both(tmp_path):
    tiny_hf("ModernBertForMaskedLM", seed=5).save_pretrained(tmp_path / "modernbert")
    with pytest.raises(ConversionError, match="a ModernBertForMaskedLM checkpoint \\(model_type 'modernbert'\\) "
                                              "does not load into BertForMaskedLM"):
        jaxbert.from_pretrained(tmp_path / "modernbert", "BertForMaskedLM")
    tiny_hf_model("BertForMaskedLM").save_pretrained(tmp_path / "bert")
    with pytest.raises(ConversionError, match="a BertForMaskedLM checkpoint \\(model_type 'bert'\\) "
                                              "does not load into ModernBertForMaskedLM"):
        jaxbert.from_pretrained(tmp_path / "bert", "ModernBertForMaskedLM")


def test_a_bare_encoder_checkpoint_loads_into_a_head_class(tmp_path):
    tiny_hf("ModernBertModel", seed=6).save_pretrained(tmp_path / "base")
    with pytest.warns(jaxbert.convert.ConversionWarning, match="classifier"):
        module, params = jaxbert.from_pretrained(tmp_path / "base", "ModernBertForSequenceClassification")
    encoder = load_file(tmp_path / "base" / "model.safetensors")
    np.testing.assert_array_equal(params["model"]["layers"]["2"]["mlp"]["Wi"]["kernel"],
                                  encoder["layers.2.mlp.Wi.weight"].T)


def test_convert_cli_both_ways_carries_the_tokenizer(tmp_path, capsys):
    from jaxbert.cli.main import main
    hf = tiny_hf("ModernBertForTokenClassification", seed=8)
    hf.save_pretrained(tmp_path / "hf")
    files = {"tokenizer.json": '{"version": "1.0"}\n', "tokenizer_config.json": '{"model_input_names": '
             '["input_ids", "attention_mask"]}\n', "special_tokens_map.json": '{"cls_token": "[CLS]"}\n'}
    for n, text in files.items():
        (tmp_path / "hf" / n).write_text(text)
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "jb"), "--to", "jaxbert", "--scan-layers"]) == 0
    assert json.loads((tmp_path / "jb" / "jaxbert.json").read_text())["model_class"] == \
        "ModernBertForTokenClassification"
    assert main(["convert", str(tmp_path / "jb"), str(tmp_path / "back"), "--to", "hf"]) == 0
    for n, text in files.items():
        assert (tmp_path / "jb" / n).read_text() == text and (tmp_path / "back" / n).read_text() == text
    _bytes_equal(load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors"))


def test_a_transformers_5_config_loads_and_keeps_its_spelling(tmp_path):
    """layer_types, rope_parameters and sliding_window instead of the 4.x keys: the same model."""
    name = "ModernBertForMaskedLM"
    hf = tiny_hf(name, seed=9)
    hf.save_pretrained(tmp_path / "v4")
    data = json.loads((tmp_path / "v4" / "config.json").read_text())
    for key in ("global_attn_every_n_layers", "local_attention", "global_rope_theta", "local_rope_theta"):
        data.pop(key, None)  # transformers 5 writes the new spellings only
    data.update(layer_types=["full_attention", "sliding_attention", "full_attention"], sliding_window=4,
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    (tmp_path / "v5").mkdir()
    (tmp_path / "v5" / "config.json").write_text(json.dumps(data))
    save_file(load_file(tmp_path / "v4" / "model.safetensors"), tmp_path / "v5" / "model.safetensors")
    ids, mask = padded_inputs(name)
    out = {}
    for v in ("v4", "v5"):
        module, params = jaxbert.from_pretrained(tmp_path / v)
        out[v] = np.asarray(module.apply({"params": params}, jnp.asarray(ids), attention_mask=jnp.asarray(mask)).logits)
    np.testing.assert_array_equal(out["v5"], out["v4"])
    jaxbert.save_pretrained(tmp_path / "back", module, params)
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["layer_types"] == data["layer_types"] and back["rope_parameters"] == data["rope_parameters"]
    # ... and the 4.x keys agree with them, so transformers 4.57 builds the same model from the export.
    assert back["sliding_window"] == 4 and back["local_attention"] == 8
    assert back["global_attn_every_n_layers"] == 2 and back["global_rope_theta"] == 160000.0
    reloaded = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "back", attn_implementation="sdpa")
    with torch.no_grad():
        theirs = reloaded.eval()(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(_real(theirs, mask), _real(out["v4"], mask), atol=1e-5, rtol=0)


def test_a_bad_config_is_refused_by_name_on_load(tmp_path):
    tiny_hf("ModernBertModel", seed=10).save_pretrained(tmp_path / "hf")
    data = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(data, local_attention=9)))
    with pytest.raises(jaxbert.errors.ConfigError, match="config.json: local_attention 9 must be a positive "
                                                              "even integer"):
        jaxbert.from_pretrained(tmp_path / "hf")


def test_the_class_comes_from_the_keys_when_config_names_none(tmp_path):
    for name in ("ModernBertForMaskedLM", "ModernBertModel"):
        tiny_hf(name, seed=12).save_pretrained(tmp_path / name)
        path = tmp_path / name / "config.json"
        data = json.loads(path.read_text())
        del data["architectures"]
        path.write_text(json.dumps(data))
        assert jaxbert.convert.load_checkpoint(tmp_path / name)[1] == name


def test_layer_types_beyond_transformers_4_are_refused_by_convert_and_parity(tmp_path, capsys):
    """A transformers-5 config whose layer types follow no every-n pattern (full, full, sliding, full):
    4.x would read global_attn_every_n_layers and build another model (it once got 3, a value the
    source never had, and parity reported a numerical FAIL). convert refuses before writing; parity
    names the cause on 4.x, and on 5.x (which reads layer_types) compares and passes. jaxbert itself
    builds the model."""
    tiny_hf("ModernBertForMaskedLM", seed=9, num_hidden_layers=4).save_pretrained(tmp_path / "v4")
    data = json.loads((tmp_path / "v4" / "config.json").read_text())
    for key in ("global_attn_every_n_layers", "local_attention", "global_rope_theta", "local_rope_theta"):
        data.pop(key, None)  # transformers 5 writes the new spellings only
    data.update(layer_types=["full_attention", "full_attention", "sliding_attention", "full_attention"],
                sliding_window=4, rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    (tmp_path / "v5").mkdir()
    (tmp_path / "v5" / "config.json").write_text(json.dumps(data))
    save_file(load_file(tmp_path / "v4" / "model.safetensors"), tmp_path / "v5" / "model.safetensors")
    module, _ = jaxbert.from_pretrained(tmp_path / "v5")
    assert module.config.layer_kinds == tuple(data["layer_types"])
    cause = "layer_types ['full_attention', 'full_attention', 'sliding_attention', 'full_attention'] follow no every-n"
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "v5"), str(tmp_path / "out"), "--to", "hf"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and cause in err and "transformers 4.x" in err, err
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["v4", "v5"]
    if int(transformers.__version__.split(".")[0]) >= 5:  # 5.x reads layer_types: a reference, which agrees
        assert main(["parity", str(tmp_path / "v5")]) == 0, capsys.readouterr().out
        return
    assert main(["parity", str(tmp_path / "v5")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and cause in err and "transformers>=5" in err, err
