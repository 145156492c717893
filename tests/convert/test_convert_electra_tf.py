"""Google's original ELECTRA pretraining checkpoints (google-research/electra), read without TensorFlow.

The bundle is written here from the format alone (tests/helpers/tf_checkpoints.write_bundle) under Google's
names: both models in one bundle, the generator narrower than the discriminator, embedding_size != hidden_size.
Each test converts it to a transformers directory, checks every tensor against a mapping spelled out below
(independently of the reader), and compares jaxbert's logits with transformers' class loaded from that directory.
"""

import json

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

import jaxbert
from jaxbert.cli.main import main as cli_main
from jaxbert.convert import convert
from tests.helpers.tf_checkpoints import write_bundle

V, E, H, I, L = 40, 12, 16, 32, 2  # the discriminator
HG, IG, LG = 8, 16, 1  # the generator: narrower and shallower
COMMON = {"model_type": "electra", "vocab_size": V, "embedding_size": E, "max_position_embeddings": 24,
          "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}
DISC = dict(COMMON, architectures=["ElectraForPreTraining"], hidden_size=H, intermediate_size=I,
            num_hidden_layers=L, num_attention_heads=2)
GEN = dict(COMMON, architectures=["ElectraForMaskedLM"], hidden_size=HG, intermediate_size=IG,
           num_hidden_layers=LG, num_attention_heads=1)
SLOTTED = ("electra/encoder/layer_0/attention/self/query/kernel", "generator_predictions/output_bias")


def _layer(scope: str, h: int, i: int) -> dict:
    shapes = {}
    for m in ("attention/self/query", "attention/self/key", "attention/self/value", "attention/output/dense"):
        shapes.update({f"{scope}/{m}/kernel": (h, h), f"{scope}/{m}/bias": (h,)})
    for m in ("attention/output/LayerNorm", "output/LayerNorm"):
        shapes.update({f"{scope}/{m}/gamma": (h,), f"{scope}/{m}/beta": (h,)})
    shapes.update({f"{scope}/intermediate/dense/kernel": (h, i), f"{scope}/intermediate/dense/bias": (i,),
                   f"{scope}/output/dense/kernel": (i, h), f"{scope}/output/dense/bias": (h,)})
    return shapes


def _variables() -> dict:
    """Google's names -> values (TF kernels are [in, out]), with Adam slots, global_step and temperature."""
    shapes = {"electra/embeddings/word_embeddings": (V, E), "electra/embeddings/position_embeddings": (24, E),
              "electra/embeddings/token_type_embeddings": (2, E), "electra/embeddings/LayerNorm/gamma": (E,),
              "electra/embeddings/LayerNorm/beta": (E,),
              "electra/embeddings_project/kernel": (E, H), "electra/embeddings_project/bias": (H,),
              "generator/embeddings_project/kernel": (E, HG), "generator/embeddings_project/bias": (HG,),
              "discriminator_predictions/dense/kernel": (H, H), "discriminator_predictions/dense/bias": (H,),
              "discriminator_predictions/dense_1/kernel": (H, 1), "discriminator_predictions/dense_1/bias": (1,),
              "generator_predictions/dense/kernel": (HG, E), "generator_predictions/dense/bias": (E,),
              "generator_predictions/LayerNorm/gamma": (E,), "generator_predictions/LayerNorm/beta": (E,),
              "generator_predictions/output_bias": (V,)}
    for n in range(L):
        shapes.update(_layer(f"electra/encoder/layer_{n}", H, I))
    for n in range(LG):
        shapes.update(_layer(f"generator/encoder/layer_{n}", HG, IG))
    rng = np.random.default_rng(3)
    out = {name: (rng.normal(0, 0.4, s) + (1.0 if name.endswith("gamma") else 0.0)).astype(np.float32)
           for name, s in shapes.items()}
    for name in SLOTTED:
        out[f"{name}/adam_m"] = rng.normal(0, 0.01, out[name].shape).astype(np.float32)
        out[f"{name}/adam_v"] = rng.uniform(0, 1e-4, out[name].shape).astype(np.float32)
    out["global_step"] = np.array(7, np.int64)
    out["temperature"] = np.array(1.0, np.float32)
    return out


def _expected(values: dict, generator: bool) -> dict:
    """transformers' state dict of the model asked for, from Google's names, by hand."""
    own, other = ("generator", "electra") if generator else ("electra", "generator")
    out = {}
    for name, value in values.items():
        if name in ("global_step", "temperature") or name.endswith(("/adam_m", "/adam_v")):
            continue
        if name.startswith(f"{other}/") and not name.startswith("electra/embeddings/"):
            continue  # the other model's encoder and projection
        if name.startswith("discriminator_predictions/" if generator else "generator_predictions/"):
            continue
        key = name
        if key.startswith(f"{own}/"):
            key = "electra/" + key[len(own) + 1:]
        key = key.replace("dense_1", "dense_prediction").replace("generator_predictions/output_bias",
                                                                 "generator_lm_head/bias")
        key = key.replace("/", ".").replace(".gamma", ".weight").replace(".beta", ".bias")
        for n in range(L):
            key = key.replace(f"layer_{n}.", f"layer.{n}.")
        if key.endswith("_embeddings"):
            key += ".weight"
        if key.endswith(".kernel"):
            key, value = key[:-len("kernel")] + "weight", value.T
        out[key] = value
    return out


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("electra_tf")
    (folder / "config.json").write_text(json.dumps(DISC))
    (folder / "generator_config.json").write_text(json.dumps(GEN))
    values = _variables()
    write_bundle(folder / "model.ckpt-7", values)
    return folder, values


def _inputs():
    rng = np.random.default_rng(5)
    ids = rng.integers(5, V, (2, 10))
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    return ids, types, mask


def _convert_and_compare(folder, values, tmp_path, generator: bool):
    out = tmp_path / ("gen" if generator else "disc")
    kwargs = dict(model_class="ElectraForMaskedLM", config=str(folder / "generator_config.json")) if generator \
        else {}
    report = convert(folder, out, "hf", **kwargs)
    assert not report.missing and not report.unused, report
    skipped = dict(report.ignored)
    other = "generator" if not generator else "discriminator"
    # every variable is mapped or skipped with its reason
    expected = _expected(values, generator)
    n_other = sum(1 for n in values if "adam" not in n and n not in ("global_step", "temperature")) - len(expected)
    assert sum(1 for why in skipped.values() if f"the {other}'s" in why) == n_other
    assert {n for n, why in skipped.items() if "Adam" in why} == {f"{s}/{m}" for s in SLOTTED
                                                                   for m in ("adam_m", "adam_v")}
    assert "global_step" in skipped and "temperature" in skipped
    written = load_file(str(out / "model.safetensors"))
    written.pop("generator_lm_head.weight", None)  # tied to the word embeddings, where written at all
    assert sorted(written) == sorted(expected)
    for key, value in expected.items():
        assert written[key].shape == value.shape and np.array_equal(written[key], value), key

    cls = transformers.ElectraForMaskedLM if generator else transformers.ElectraForPreTraining
    ref = cls.from_pretrained(out).eval()
    if generator:  # the tied lm head reads the shared table
        assert np.array_equal(ref.generator_lm_head.weight.detach().numpy(),
                              values["electra/embeddings/word_embeddings"])
    ids, types, mask = _inputs()
    with torch.no_grad():
        want = ref(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                   attention_mask=torch.tensor(mask)).logits.numpy()
    model, params = jaxbert.from_pretrained(out)
    got = np.asarray(model.apply({"params": params}, ids, types, mask).logits)
    assert got.shape == want.shape == ((2, 10, V) if generator else (2, 10))
    real = mask.astype(bool)  # the padded positions' outputs are not compared
    np.testing.assert_allclose(got[real], want[real], atol=2e-5, rtol=0)


def test_google_electra_bundle_converts_to_the_discriminator_by_default(bundle, tmp_path):
    _convert_and_compare(*bundle, tmp_path, generator=False)


def test_google_electra_bundle_converts_to_the_generator_when_asked(bundle, tmp_path):
    _convert_and_compare(*bundle, tmp_path, generator=True)


def test_a_variable_under_no_known_scope_is_refused_by_name(tmp_path, capsys):
    values = dict(_variables(), **{"electra/pooler/dense/kernel": np.ones((H, H), np.float32)})
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(DISC))
    write_bundle(tmp_path / "ckpt" / "model.ckpt-7", values)
    assert cli_main(["convert", str(tmp_path / "ckpt"), str(tmp_path / "out"), "--to", "hf"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "electra/pooler/dense/kernel" in err, err
    assert not (tmp_path / "out").exists()
