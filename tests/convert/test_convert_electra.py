"""ELECTRA through the converter: every class HF -> jaxbert -> HF bit for bit (transformers reloads the export and
gives the same outputs, which jaxbert's match), jaxbert params -> state dict -> params bit for bit in both layouts
(tied and untied generator, a summary with and without its projection), the class from the keys, a tied
generator_lm_head that differs refused, a discriminator checkpoint read into a task class."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

import jaxbert
from jaxbert.convert import ConversionError, params_to_state_dict, state_dict_to_params
from jaxbert.model.electra.config import ElectraConfig
from jaxbert.model.electra.family import build
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten
from tests.helpers.electra import CLASSES, TINY, electra_dirs, padded_inputs  # noqa: F401 (a fixture)


def _bytes_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k


def _main(out, name):
    """The class's main output, either framework's."""
    if name == "ElectraModel":
        return out.last_hidden_state
    if name == "ElectraForQuestionAnswering":
        return out.start_logits, out.end_logits
    return out.logits


def _inputs(name):
    return padded_inputs(choices=2 if name == "ElectraForMultipleChoice" else 0)


@pytest.mark.parametrize("name", CLASSES)
def test_hf_to_jaxbert_to_hf_is_bit_exact_and_transformers_reloads_it(name, electra_dirs, tmp_path):
    src = electra_dirs(name)
    scan = CLASSES.index(name) % 2 == 1
    module, params, report = jaxbert.from_pretrained(src, scan_layers=scan, strict=True, return_report=True)
    assert type(module).__name__ == name and module.config.embedding_size == 16
    assert not report.missing and not report.unused
    encoder = params if name == "ElectraModel" else params["electra"]
    assert encoder["embeddings"]["word_embeddings"]["embedding"].shape == (99, 16)
    assert encoder["embeddings_project"]["kernel"].shape == (16, 32)
    assert ("attention" in encoder["encoder"]["layer"]) if scan else ("1" in encoder["encoder"]["layer"])

    jaxbert.save_pretrained(tmp_path / "back", module, params)
    _bytes_equal(load_file(src / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors"))
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "electra"
    assert config["embedding_size"] == 16 and config["summary_type"] == "first"

    ids, types, mask = _inputs(name)
    torch_in = dict(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
    with torch.no_grad():
        theirs = _main(getattr(transformers, name).from_pretrained(src).eval()(**torch_in), name)
        reloaded = _main(getattr(transformers, name).from_pretrained(tmp_path / "back").eval()(**torch_in), name)
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (theirs, reloaded))):
        assert torch.equal(a, b)
    ours = _main(jax.jit(module.apply)({"params": params}, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)),
                 name)
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (ours, theirs))):
        a, b = np.asarray(a), b.numpy()
        real = mask.astype(bool)
        if a.ndim >= 2 and a.shape[:2] == real.shape:  # per token: the real ones
            a, b = a[real], b[real]
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)


@pytest.mark.parametrize("name,config", [
    ("ElectraForMaskedLM", TINY),
    ("ElectraForMaskedLM", dict(TINY, tie_word_embeddings=False)),
    ("ElectraForPreTraining", dict(TINY, embedding_size=32)),
    ("ElectraForMultipleChoice", dict(TINY, summary_use_proj=False, num_labels=3)),
], ids=["generator-tied", "generator-untied", "discriminator-unprojected", "choice-no-summary"])
def test_jaxbert_to_state_dict_to_jaxbert_is_bit_exact_in_both_layouts(name, config):
    config = ElectraConfig(**config)
    module = build(name, config)
    x = jnp.zeros((1, 2, 8) if name == "ElectraForMultipleChoice" else (1, 8), jnp.int32)
    params = jax.tree_util.tree_map(np.asarray, jax.jit(module.init)(jax.random.PRNGKey(3), x)["params"])
    sd = params_to_state_dict(params, config, name)
    hf = getattr(transformers, name)(transformers.ElectraConfig(**config.to_dict()))
    tied = {"generator_lm_head.weight"} if config.tie_word_embeddings and name == "ElectraForMaskedLM" else set()
    assert set(sd) == set(hf.state_dict()) - tied  # transformers' keys; the tied weight left out as it saves
    for key in sd:
        assert tuple(sd[key].shape) == tuple(hf.state_dict()[key].shape), key
    assert ("electra.embeddings_project.weight" in sd) == (config.embedding_size != config.hidden_size)
    back, _ = state_dict_to_params(sd, config, name, strict=True)
    a, b = flatten(params), flatten(back)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k
    scanned, _ = state_dict_to_params(sd, config, name, scan_layers=True, strict=True)
    layer = scanned["electra"]["encoder"]["layer"]
    assert layer["intermediate"]["dense"]["kernel"].shape == (2, 32, 37)  # [L, H, I]
    np.testing.assert_array_equal(layer["output"]["LayerNorm"]["bias"][1],
                                  params["electra"]["encoder"]["layer"]["1"]["output"]["LayerNorm"]["bias"])
    _bytes_equal(sd, params_to_state_dict(scanned, config, name))
    shapes = jax.eval_shape(build(name, config, ModelOptions(scan_layers=True)).init, jax.random.PRNGKey(0), x)["params"]
    assert jax.tree_util.tree_map(lambda s: s.shape, shapes) == jax.tree_util.tree_map(np.shape, scanned)


def test_the_class_comes_from_the_keys_and_a_discriminator_loads_into_a_task_class(electra_dirs, tmp_path):
    for name in CLASSES:
        folder = tmp_path / name
        folder.mkdir()
        src = electra_dirs(name)
        data = json.loads((src / "config.json").read_text())
        del data["architectures"]
        (folder / "config.json").write_text(json.dumps(data))
        (folder / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
        assert jaxbert.convert.load_checkpoint(folder)[1] == name
    disc = electra_dirs("ElectraForPreTraining")
    with pytest.warns(jaxbert.convert.ConversionWarning, match="classifier"):
        _, params = jaxbert.from_pretrained(disc, "ElectraForSequenceClassification")
    saved = load_file(disc / "model.safetensors")
    np.testing.assert_array_equal(params["electra"]["encoder"]["layer"]["1"]["output"]["dense"]["kernel"],
                                  saved["electra.encoder.layer.1.output.dense.weight"].T)
    assert "discriminator_predictions" not in params and "classifier" in params


def test_a_tied_generator_head_that_differs_is_refused_and_a_missing_key_named(electra_dirs):
    hf = transformers.ElectraForMaskedLM.from_pretrained(electra_dirs("ElectraForMaskedLM"))
    sd = {k: v.numpy().copy() for k, v in hf.state_dict().items()}
    config = ElectraConfig.from_dict(hf.config.to_dict())
    sd["generator_lm_head.weight"] = sd["generator_lm_head.weight"] + 1
    with pytest.raises(ConversionError, match="generator_lm_head.weight is tied to electra.embeddings.word_embeddings"):
        state_dict_to_params(sd, config, "ElectraForMaskedLM")
    sd = {k: v.numpy() for k, v in hf.state_dict().items() if k != "electra.embeddings_project.bias"}
    with pytest.raises(ConversionError, match=r"missing electra.embeddings_project.bias -> "
                                              r"electra/embeddings_project/bias \[32\]"):
        state_dict_to_params(sd, config, "ElectraForMaskedLM", strict=True)
