"""`jaxbert parity` on ModernBERTs saved by transformers: the stage table (embeddings, every layer,
the final norm, the head), float64 against sdpa within 1e-10, the float64 truth, gradients, inputs
past the local window and padded, both poolings."""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxbert.cli.main  # noqa: E402
from tests.helpers.modernbert import TINY, tiny_hf  # noqa: E402

LAYERS = [f"layer {i}" for i in range(1, TINY["num_hidden_layers"] + 1)]


def _parity(tmp_path, name, *argv, **overrides):
    folder = tmp_path / name
    if not folder.exists():
        tiny_hf(name, seed=5, **overrides).save_pretrained(folder)
    out = tmp_path / f"{name}-{len(list(tmp_path.glob('*.json')))}.json"
    rc = jaxbert.cli.main.main(["parity", str(folder), "--json", str(out), *argv])
    return rc, json.loads(out.read_text())


def test_mlm_stage_table_float32_float64_truth_and_gradients(tmp_path, capsys):
    name = "ModernBertForMaskedLM"
    rc, table = _parity(tmp_path, name)
    assert rc == 0, capsys.readouterr().out
    assert [r["stage"] for r in table["rows"]] == ["embeddings", *LAYERS, "final norm", "mlm logits"]
    assert "sdpa attention" in table["env"]["reference"]
    printed = capsys.readouterr().out
    # the first row reaches past the window (8 tokens: +-4) and the others are padded
    assert "past the local attention window" in printed
    rc, table = _parity(tmp_path, name, "--dtype", "float64", "--grad")
    assert rc == 0, capsys.readouterr().out
    assert max(r["max_abs"] for r in table["rows"]) <= 1e-10
    assert table["grad"]["worst_rel"] <= 1e-9
    rc, table = _parity(tmp_path, name, "--reference", "float64", "--pad-left")
    assert rc == 0, capsys.readouterr().out
    assert all(r["jax_vs_truth"] is not None for r in table["rows"])


@pytest.mark.parametrize("name,pooling,argv", [
    ("ModernBertForSequenceClassification", "mean", ("--dtype", "float64")),
    ("ModernBertForMultipleChoice", "cls", ("--pad-left", "--grad")),
    ("ModernBertForQuestionAnswering", "cls", ()),
])
def test_task_heads(tmp_path, capsys, name, pooling, argv):
    rc, table = _parity(tmp_path, name, *argv, classifier_pooling=pooling)
    assert rc == 0, capsys.readouterr().out
    stages = [r["stage"] for r in table["rows"]]
    assert stages[:len(LAYERS) + 2] == ["embeddings", *LAYERS, "final norm"]
    assert stages[len(LAYERS) + 2:] == (["start logits", "end logits"] if "Question" in name else ["logits"])


def test_a_wrong_weight_fails_from_its_layer_on_and_train_steps_is_refused_by_name(tmp_path, capsys):
    import jaxbert
    from jaxbert.parity import compare, torch_model
    from jaxbert.parity.inputs import make_inputs

    tiny_hf("ModernBertForMaskedLM", seed=5).save_pretrained(tmp_path / "hf")
    module, params = jaxbert.from_pretrained(tmp_path / "hf")
    reference = torch_model(module, params)
    norm = params["model"]["layers"]["1"]["mlp_norm"]
    norm["scale"] = norm["scale"] + 0.05  # layer 1 (the second layer, a sliding one) off
    inputs = make_inputs(None, ["a b c ||| d", "e f g h i j k l m n o p q r ||| s t"], 64, TINY["vocab_size"])
    report = compare(module, params, inputs, torch_reference=reference)
    assert [r.stage for r in report.rows if not r.ok] == ["layer 2", "layer 3", "final norm", "mlm logits"]
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "hf"), "--train-steps", "2"]) == 2
    assert "--train-steps" in capsys.readouterr().err
