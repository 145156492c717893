"""DeBERTa-v2 through the converter, v2-style and v3-style configs: HF -> jaxbert -> HF bit for bit (transformers
reloads the export and gives the same outputs; config.json keeps its keys as they came, pos_att_type's spelling
too), params -> state dict -> params bit for bit in both layouts, strict key accounting, the class from the keys,
and what the family refuses by name."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

import jaxbert
from jaxbert.convert import params_to_state_dict, state_dict_to_params
from jaxbert.errors import ConfigError
from jaxbert.model.deberta_v2 import DebertaV2Config, build, infer_class
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten
from tests.helpers.deberta import CLASSES, STYLES, saved_model


@pytest.fixture(scope="session")
def deberta_models():
    """saved_model: the session's tiny models, one per class and style."""
    return saved_model


def _bytes_equal(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k, v in a.items():
        assert v.dtype == b[k].dtype and v.shape == b[k].shape, k
        assert np.array_equal(v.view(np.uint8), b[k].view(np.uint8)), k


def _inputs(name):
    rng = np.random.RandomState(3)
    ids = rng.randint(4, 100, (2, 21))
    mask = np.ones_like(ids)
    mask[1, 12:] = 0
    ids = np.where(mask == 1, ids, 0)
    if name.endswith("MultipleChoice"):
        ids, mask = ids[:, None].repeat(2, 1), mask[:, None].repeat(2, 1)
    return ids, mask


def _outputs(out):
    return [getattr(out, a) for a in ("start_logits", "logits", "last_hidden_state")
            if getattr(out, a, None) is not None][:1]


@pytest.mark.parametrize("style", ["v2", "v3"])
@pytest.mark.parametrize("name", CLASSES)
def test_hf_to_jaxbert_to_hf_is_bit_exact_and_transformers_reloads_it(deberta_models, tmp_path, style, name):
    hf_dir = deberta_models(name, style)
    scan = style == "v3"  # v2's conv layer sits between layers 1 and 2: no scanned layout (refused below)
    module, params, report = jaxbert.from_pretrained(hf_dir, scan_layers=scan, strict=True, return_report=True)
    assert type(module).__name__ == name and not report.missing and not report.unused
    jaxbert.save_pretrained(tmp_path / "back", module, params)
    _bytes_equal(load_file(hf_dir / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors"))
    given = json.loads((hf_dir / "config.json").read_text())
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    for key in set(given) - {"transformers_version"}:
        assert back[key] == given[key], key
    assert back["pos_att_type"] == STYLES[style]["pos_att_type"] or back["pos_att_type"] == ["p2c", "c2p"]

    ids, mask = _inputs(name)
    load = lambda folder: getattr(transformers, name).from_pretrained(folder).eval()
    with torch.no_grad():
        want = _outputs(load(hf_dir)(torch.tensor(ids), attention_mask=torch.tensor(mask)))[0]
        again = _outputs(load(tmp_path / "back")(torch.tensor(ids), attention_mask=torch.tensor(mask)))[0]
    assert torch.equal(want, again)
    got = np.asarray(_outputs(module.apply({"params": params}, jnp.asarray(ids), attention_mask=jnp.asarray(mask)))[0])
    real = mask.reshape(-1, mask.shape[-1]).astype(bool)
    want = want.numpy()
    if got.ndim == 3:
        got, want = got.reshape(-1, *got.shape[-2:])[real], want.reshape(-1, *want.shape[-2:])[real]
    elif got.shape == real.shape:  # question answering's start logits [B, T]
        got, want = got[real], want[real]
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)


@pytest.mark.parametrize("style,name", [("v3", "DebertaV2ForMaskedLM"), ("v2", "DebertaV2ForMaskedLM"),
                                        ("v3", "DebertaV2ForMultipleChoice")])
def test_params_to_state_dict_and_back_bit_exact_in_both_layouts(deberta_models, style, name):
    module, params = jaxbert.from_pretrained(deberta_models(name, style))
    config = module.config
    for scan in (False, True) if style == "v3" else (False,):
        sd = params_to_state_dict(params, config, name)
        back, _ = state_dict_to_params(sd, config, name, scan_layers=scan, strict=True)
        again = params_to_state_dict(back, config, name)
        _bytes_equal(sd, again)
        if scan:
            assert flatten(back)[("deberta", "encoder", "layer", "attention", "self", "query_proj", "kernel")].shape[0] == 2
    # transformers 4.57's legacy head lists the tied decoder weight and bias in state_dict(): read as ties
    tied = dict(params_to_state_dict(params, config, name, tied=True))
    if config.legacy and name.endswith("MaskedLM"):
        assert {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"} <= set(tied)
        state_dict_to_params(tied, config, name, strict=True)


def test_the_class_is_read_from_the_keys_without_architectures(deberta_models):
    for style, name in (("v3", "DebertaV2ForMaskedLM"), ("v2", "DebertaV2ForMaskedLM"),
                        ("v3", "DebertaV2ForQuestionAnswering"), ("v3", "DebertaV2ForTokenClassification"),
                        ("v3", "DebertaV2ForSequenceClassification"), ("v3", "DebertaV2Model")):
        folder = deberta_models(name, style)
        data = json.loads((folder / "config.json").read_text())
        data.pop("architectures")
        keys = list(load_file(folder / "model.safetensors"))
        assert infer_class(DebertaV2Config.from_dict(data), keys) == name, (style, name)


def test_what_the_family_cannot_take_is_refused_by_name():
    v2 = DebertaV2Config.from_dict(dict(STYLES["v2"], model_type="deberta-v2"))
    with pytest.raises(ValueError, match="scan_layers with conv_kernel_size"):
        build("DebertaV2Model", v2, ModelOptions(scan_layers=True))
    with pytest.raises(ValueError, match="attention_impl 'splash'.*only the 'einsum' path"):
        build("DebertaV2Model", v2, ModelOptions(attention_impl="splash"))
    assert build("DebertaV2Model", v2, ModelOptions(attention_impl="auto")).options.attention_impl == "einsum"
    for change, message in ((dict(pos_att_type="p2p|c2p"), "pos_att_type 'p2p|c2p' names \\['p2p'\\]"),
                            (dict(conv_kernel_size=4), "conv_kernel_size 4"),
                            (dict(legacy=True, tie_word_embeddings=False), "tie_word_embeddings false with legacy"),
                            (dict(hidden_size=30), "hidden_size \\(30\\) must be a multiple"),
                            (dict(model_type="deberta"), "model_type 'deberta' is not a DeBERTa-v2 config")):
        with pytest.raises(ConfigError, match=message):
            DebertaV2Config.from_dict({**STYLES["v2"], "model_type": "deberta-v2", **change})


def test_config_round_trip_keeps_the_released_spelling():
    """A released v3 config.json (pos_att_type "p2c|c2p", no share_att_key key absent) comes back as it was."""
    data = {"model_type": "deberta-v2", "vocab_size": 128100, "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "relative_attention": True, "position_buckets": 256,
            "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7,
            "max_relative_positions": -1, "position_biased_input": False, "type_vocab_size": 0,
            "max_position_embeddings": 512, "hidden_act": "gelu", "initializer_range": 0.02, "pad_token_id": 0}
    config = DebertaV2Config.from_dict(data)
    assert config.att_terms == ("p2c", "c2p") and config.att_span == 256 and config.max_relative == 512
    assert config.scale_factor == 3 and config.norm_rel
    out = config.to_dict()
    assert {k: out[k] for k in data} == data
    assert "conv_kernel_size" not in out and "embedding_size" not in out  # not given: not written
    assert transformers.DebertaV2Config(**out).pos_att_type == ["p2c", "c2p"]
