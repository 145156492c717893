"""EuroBERT through the converter: HF -> jaxbert -> HF bit for bit (transformers 5 reloads the export and gives
the same logits), jaxbert params -> state dict -> params bit for bit in both layouts, strict key accounting, the
class from ``architectures`` or from the keys, a tied lm_head checked, the released checkpoints' config
spelling, ``jaxbert convert`` both ways."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers.models.eurobert", reason="EuroBERT is in transformers >= 5 (README's test command installs it)")
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

import jaxbert  # noqa: E402
from jaxbert.cli.main import main  # noqa: E402
from jaxbert.convert import ConversionError, params_to_state_dict, state_dict_to_params  # noqa: E402
from jaxbert.model.eurobert import EuroBertConfig, build  # noqa: E402
from jaxbert.model.options import ModelOptions  # noqa: E402
from jaxbert.model.params import flatten  # noqa: E402
from tests.helpers.eurobert import TINY, padded_inputs, tiny_hf  # noqa: E402


def _bytes_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k


def _hf_main(model, name, ids, mask):
    with torch.no_grad():
        out = model(torch.tensor(ids), attention_mask=torch.tensor(mask))
    return out.last_hidden_state if name == "EuroBertModel" else out.logits


@pytest.mark.parametrize("name,scan,pooling", [("EuroBertForMaskedLM", True, "late"), ("EuroBertModel", False, "late"),
                                               ("EuroBertForSequenceClassification", True, "mean"),
                                               ("EuroBertForTokenClassification", False, "late")])
def test_hf_to_jaxbert_to_hf_is_bit_exact_and_transformers_reloads_it(name, scan, pooling, tmp_path):
    hf = tiny_hf(name, seed=1, attn="sdpa", classifier_pooling=pooling)
    hf.save_pretrained(tmp_path / "hf")
    module, params, report = jaxbert.from_pretrained(tmp_path / "hf", scan_layers=scan, strict=True, return_report=True)
    assert type(module).__name__ == name and module.config.classifier_pooling == pooling  # from config.json
    assert not report.missing and not report.unused
    layers = params["layers"] if name == "EuroBertModel" else params["model"]["layers"]
    assert ("self_attn" in layers) if scan else ("2" in layers)

    jaxbert.save_pretrained(tmp_path / "back", module, params)
    _bytes_equal(load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors"))
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "eurobert"
    assert config["rope_parameters"] == TINY["rope_parameters"] and config["num_key_value_heads"] == 2

    # transformers loads the export as it loads the original (compared loaded with loaded)
    load = lambda folder: getattr(transformers, name).from_pretrained(tmp_path / folder).eval()  # noqa: E731
    ids, mask = padded_inputs()
    assert torch.equal(_hf_main(load("back"), name, ids, mask), _hf_main(load("hf"), name, ids, mask))
    ours = jax.jit(module.apply)({"params": params}, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    ours = ours.last_hidden_state if name == "EuroBertModel" else ours.logits
    want = _hf_main(hf, name, ids, mask).numpy()
    real = mask.astype(bool)
    got = np.asarray(ours)
    np.testing.assert_allclose(got[real] if got.ndim == 3 else got, want[real] if want.ndim == 3 else want,
                               atol=1e-5, rtol=0)


BIASED = dict(TINY, attention_bias=True, mlp_bias=True, num_labels=3)


@pytest.mark.parametrize("name,config", [
    ("EuroBertForMaskedLM", dict(BIASED, tie_word_embeddings=True)),
    ("EuroBertForMaskedLM", BIASED),
    ("EuroBertForMaskedLM", dict(TINY, tie_word_embeddings=True)),
    ("EuroBertForSequenceClassification", BIASED),
    ("EuroBertForTokenClassification", TINY),
], ids=["mlm-tied-biased", "mlm-biased", "mlm-tied", "seq-biased", "token"])
def test_jaxbert_to_state_dict_to_jaxbert_is_bit_exact_in_both_layouts(name, config):
    config = EuroBertConfig(**config)
    module = build(name, config)
    params = jax.jit(module.init)(jax.random.PRNGKey(3), jnp.zeros((1, 8), jnp.int32))["params"]
    params = jax.tree_util.tree_map(np.asarray, params)
    sd = params_to_state_dict(params, config, name)
    hf = getattr(transformers, name)(transformers.EuroBertConfig(**config.to_dict()))
    tied = {"lm_head.weight"} if config.tie_word_embeddings and name.endswith("MaskedLM") else set()
    assert set(sd) == set(hf.state_dict()) - tied  # transformers' keys; the tied weight left out as it saves
    for key in sd:
        assert tuple(sd[key].shape) == tuple(hf.state_dict()[key].shape), key
    back, _ = state_dict_to_params(sd, config, name, strict=True)
    a, b = flatten(params), flatten(back)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k
    # The scanned layout: every layer stacked under layers with a leading axis; the same tensors back.
    scanned, _ = state_dict_to_params(sd, config, name, scan_layers=True, strict=True)
    layers = scanned["model"]["layers"]
    assert layers["self_attn"]["k_proj"]["kernel"].shape == (3, 32, 16)  # [L, H, K x head_dim]
    np.testing.assert_array_equal(layers["mlp"]["down_proj"]["kernel"][2],
                                  params["model"]["layers"]["2"]["mlp"]["down_proj"]["kernel"])
    _bytes_equal(sd, params_to_state_dict(scanned, config, name))
    shapes = jax.eval_shape(build(name, config, ModelOptions(scan_layers=True)).init, jax.random.PRNGKey(0),
                            jnp.zeros((1, 8), jnp.int32))["params"]
    assert jax.tree_util.tree_map(lambda x: x.shape, shapes) == jax.tree_util.tree_map(np.shape, scanned)


def test_strict_loading_names_the_missing_and_the_extra_key():
    name = "EuroBertForSequenceClassification"
    hf = tiny_hf(name, seed=2)
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    config = EuroBertConfig.from_dict(hf.config.to_dict())
    missing = dict(sd)
    del missing["model.layers.1.post_attention_layernorm.weight"]
    with pytest.raises(ConversionError, match="missing model.layers.1.post_attention_layernorm.weight -> "
                                              "model/layers/1/post_attention_layernorm/scale \\[32\\]"):
        state_dict_to_params(missing, config, name, strict=True)
    extra = dict(sd, **{"model.layers.0.self_attn.q_norm.weight": sd["model.norm.weight"]})
    with pytest.raises(ConversionError, match="unused model.layers.0.self_attn.q_norm.weight: no "
                                              "EuroBertForSequenceClassification param for it"):
        state_dict_to_params(extra, config, name, strict=True)
    wrong = dict(sd, **{"model.layers.2.self_attn.k_proj.weight": np.zeros((32, 32), np.float32)})
    with pytest.raises(ConversionError, match="model.layers.2.self_attn.k_proj.weight: checkpoint \\[32, 32\\], "
                                              "EuroBertForSequenceClassification expects \\[16, 32\\]"):
        state_dict_to_params(wrong, config, name)
    # Not strict: the missing norm is initialised as init makes it (ones) and reported.
    params, report = state_dict_to_params(missing, config, name)
    assert [p for p, _ in report.missing] == [("model", "layers", "1", "post_attention_layernorm", "scale")]
    assert np.all(params["model"]["layers"]["1"]["post_attention_layernorm"]["scale"] == 1)


def test_a_tied_lm_head_that_differs_is_refused():
    name = "EuroBertForMaskedLM"
    hf = tiny_hf(name, seed=4, tie_word_embeddings=True)
    sd = {k: v.numpy().copy() for k, v in hf.state_dict().items()}
    sd["lm_head.weight"] = sd["lm_head.weight"] + 1
    with pytest.raises(ConversionError, match="lm_head.weight is tied to model.embed_tokens.weight"):
        state_dict_to_params(sd, EuroBertConfig.from_dict(hf.config.to_dict()), name)


def test_a_bare_encoder_checkpoint_loads_into_a_head_class_and_the_class_comes_from_the_keys(tmp_path):
    tiny_hf("EuroBertModel", seed=6).save_pretrained(tmp_path / "base")
    with pytest.warns(jaxbert.convert.ConversionWarning, match="classifier"):
        module, params = jaxbert.from_pretrained(tmp_path / "base", "EuroBertForTokenClassification")
    encoder = load_file(tmp_path / "base" / "model.safetensors")
    np.testing.assert_array_equal(params["model"]["layers"]["2"]["mlp"]["up_proj"]["kernel"],
                                  encoder["layers.2.mlp.up_proj.weight"].T)
    for name in ("EuroBertForMaskedLM", "EuroBertForSequenceClassification", "EuroBertForTokenClassification",
                 "EuroBertModel"):
        tiny_hf(name, seed=12).save_pretrained(tmp_path / name)
        path = tmp_path / name / "config.json"
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "architectures"}))
        assert jaxbert.convert.load_checkpoint(tmp_path / name)[1] == name


def test_the_released_checkpoints_config_spelling_loads_and_round_trips(tmp_path):
    """config.json as the checkpoints released before transformers 5 spell it (rope_theta at the top, no
    rope_parameters): the same model; the export keeps rope_theta and adds rope_parameters."""
    name = "EuroBertForMaskedLM"
    tiny_hf(name, seed=9).save_pretrained(tmp_path / "v5")
    data = json.loads((tmp_path / "v5" / "config.json").read_text())
    data.pop("rope_parameters")
    data.update(rope_theta=250000, rope_scaling=None, clf_pooling="late")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps(data))
    save_file(load_file(tmp_path / "v5" / "model.safetensors"), tmp_path / "old" / "model.safetensors")
    ids, mask = padded_inputs()
    out = {}
    for v in ("v5", "old"):
        module, params = jaxbert.from_pretrained(tmp_path / v)
        out[v] = np.asarray(module.apply({"params": params}, jnp.asarray(ids), attention_mask=jnp.asarray(mask)).logits)
    np.testing.assert_array_equal(out["old"], out["v5"])
    jaxbert.save_pretrained(tmp_path / "back", module, params)
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["rope_theta"] == 250000 and back["rope_parameters"]["rope_theta"] == 250000.0
    reloaded = transformers.EuroBertForMaskedLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        theirs = reloaded(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(theirs, out["old"], atol=1e-5, rtol=0)


def test_a_config_it_cannot_honour_is_refused_by_name_on_load(tmp_path):
    tiny_hf("EuroBertModel", seed=10).save_pretrained(tmp_path / "hf")
    data = json.loads((tmp_path / "hf" / "config.json").read_text())
    data["rope_parameters"] = {"rope_type": "dynamic", "rope_theta": 250000.0, "factor": 2.0}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(data))
    with pytest.raises(jaxbert.errors.ConfigError, match="config.json: rope_parameters rope_type 'dynamic' "
                                                              "is not supported"):
        jaxbert.from_pretrained(tmp_path / "hf")


def test_convert_cli_both_ways_carries_the_tokenizer(tmp_path):
    tiny_hf("EuroBertForTokenClassification", seed=8).save_pretrained(tmp_path / "hf")
    files = {"tokenizer.json": '{"version": "1.0"}\n', "tokenizer_config.json": '{"model_input_names": '
             '["input_ids", "attention_mask"]}\n'}
    for n, text in files.items():
        (tmp_path / "hf" / n).write_text(text)
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "jb"), "--to", "jaxbert", "--scan-layers"]) == 0
    assert json.loads((tmp_path / "jb" / "jaxbert.json").read_text())["model_class"] == "EuroBertForTokenClassification"
    assert main(["convert", str(tmp_path / "jb"), str(tmp_path / "back"), "--to", "hf"]) == 0
    for n, text in files.items():
        assert (tmp_path / "back" / n).read_text() == text
    _bytes_equal(load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors"))
