"""`jaxbert parity` on EuroBERTs saved by transformers 5: the stage table (embeddings, every layer, the final
norm, the head) of every class and every classifier_pooling, float32 within 1e-5 and float64 against sdpa within
1e-10 (transformers' float32 norms and RoPE tables made float64 by the family's hook and parity's rotary patch),
the float64 truth, gradients, a training trajectory."""

import dataclasses
import json

import pytest

pytest.importorskip("transformers.models.eurobert", reason="EuroBERT is in transformers >= 5 (README's test command installs it)")

import jaxbert.cli.main  # noqa: E402
from jaxbert.model.families import BY_MODEL_TYPE, FAMILIES  # noqa: E402
from tests.helpers.eurobert import TINY, tiny_hf  # noqa: E402

LAYERS = [f"layer {i}" for i in range(1, TINY["num_hidden_layers"] + 1)]


def _parity(tmp_path, name, *argv, pooling="late"):
    folder = tmp_path / f"{name}-{pooling}"
    if not folder.exists():
        tiny_hf(name, seed=5, classifier_pooling=pooling).save_pretrained(folder)
    out = tmp_path / f"{name}-{len(list(tmp_path.glob('*.json')))}.json"
    rc = jaxbert.cli.main.main(["parity", str(folder), "--json", str(out), *argv])
    return rc, json.loads(out.read_text())


@pytest.mark.parametrize("name,pooling", [("EuroBertModel", "late"), ("EuroBertForMaskedLM", "late"),
                                          ("EuroBertForSequenceClassification", "bos"),
                                          ("EuroBertForSequenceClassification", "mean"),
                                          ("EuroBertForSequenceClassification", "late"),
                                          ("EuroBertForTokenClassification", "late")])
def test_every_head_and_pooling_float32_and_float64(tmp_path, capsys, name, pooling):
    head = {"EuroBertModel": [], "EuroBertForMaskedLM": ["mlm logits"]}.get(name, ["logits"])
    for dtype, bound in (("float32", 1e-5), ("float64", 1e-10)):
        rc, table = _parity(tmp_path, name, "--dtype", dtype, pooling=pooling)
        assert rc == 0, capsys.readouterr().out
        assert [r["stage"] for r in table["rows"]] == ["embeddings", *LAYERS, "final norm", *head]
        assert max(r["max_abs"] for r in table["rows"]) <= bound, table["rows"]
        assert "sdpa attention" in table["env"]["reference"]


def test_without_the_family_hook_the_float64_reference_is_float32_exact_only(tmp_path, monkeypatch):
    """transformers' EuroBertRMSNorm computes in float32 in a float64 model: with the family's
    float64_reference removed, float64 parity fails from the first layer on."""
    bare = dataclasses.replace(FAMILIES["eurobert"], float64_reference=None)
    monkeypatch.setitem(FAMILIES, "eurobert", bare)
    monkeypatch.setitem(BY_MODEL_TYPE, "eurobert", bare)
    rc, table = _parity(tmp_path, "EuroBertForMaskedLM", "--dtype", "float64")
    assert rc == 1
    assert [r["stage"] for r in table["rows"] if not r["ok"]][0] == "layer 1"
    assert max(r["max_abs"] for r in table["rows"]) > 1e-9


def test_gradients_the_float64_truth_and_a_trajectory(tmp_path, capsys):
    name = "EuroBertForMaskedLM"
    rc, table = _parity(tmp_path, name, "--dtype", "float64", "--grad")
    assert rc == 0, capsys.readouterr().out
    assert table["grad"]["worst_rel"] <= 1e-9
    rc, table = _parity(tmp_path, name, "--reference", "float64", "--pad-left")
    assert rc == 0, capsys.readouterr().out
    assert all(r["jax_vs_truth"] is not None for r in table["rows"])
    rc, data = _parity(tmp_path, name, "--train-steps", "3", "--dtype", "float64", "--lr", "1e-3")
    assert rc == 0, capsys.readouterr().out
    rows = data["rows"]
    assert data["kind"] == "trajectory" and [r["step"] for r in rows] == [1, 2, 3]
    assert max(r["loss_rel"] for r in rows) <= 1e-9 and max(r["param_rel"] for r in rows) <= 1e-8
    assert len({r["loss_torch"] for r in rows}) == 3  # the weights moved


def test_a_wrong_weight_fails_from_its_layer_on(tmp_path):
    import jaxbert
    from jaxbert.parity import compare, torch_model
    from jaxbert.parity.inputs import make_inputs

    tiny_hf("EuroBertForMaskedLM", seed=5).save_pretrained(tmp_path / "hf")
    module, params = jaxbert.from_pretrained(tmp_path / "hf")
    reference = torch_model(module, params)
    kernel = params["model"]["layers"]["1"]["self_attn"]["v_proj"]["kernel"]
    params["model"]["layers"]["1"]["self_attn"]["v_proj"]["kernel"] = kernel + 0.05  # the second layer off
    inputs = make_inputs(None, ["a b c ||| d", "e f g h i j k l m n o p q r ||| s t"], 64, TINY["vocab_size"])
    report = compare(module, params, inputs, torch_reference=reference)
    assert [r.stage for r in report.rows if not r.ok] == ["layer 2", "layer 3", "final norm", "mlm logits"]
