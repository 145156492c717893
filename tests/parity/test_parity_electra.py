"""`jaxbert parity` on ELECTRAs saved by transformers (embedding_size 16 projected to hidden 32): the stage table
(the projected embeddings, every layer, the head) of every class, float32 within 1e-5 and float64 within 1e-10; an
unprojected discriminator (embedding_size = hidden_size) too; a wrong weight fails from its layer on."""

import json

import pytest

import jaxbert
import jaxbert.cli.main
from tests.helpers.electra import CLASSES, TINY, electra_dirs  # noqa: F401 (a fixture)

HEAD_STAGES = {"ElectraModel": [], "ElectraForPreTraining": ["rtd logits"],
               "ElectraForMaskedLM": ["mlm logits"], "ElectraForQuestionAnswering": ["start logits", "end logits"]}


def _parity(folder, out, *argv):
    rc = jaxbert.cli.main.main(["parity", str(folder), "--json", str(out), *argv])
    return rc, json.loads(out.read_text())


@pytest.mark.parametrize("name", CLASSES)
def test_every_head_float32_and_float64(name, electra_dirs, tmp_path, capsys):
    stages = ["embeddings", "layer 1", "layer 2", *HEAD_STAGES.get(name, ["logits"])]
    for dtype, bound in (("float32", 1e-5), ("float64", 1e-10)):
        rc, table = _parity(electra_dirs(name), tmp_path / f"{dtype}.json", "--dtype", dtype)
        assert rc == 0, capsys.readouterr().out
        assert [r["stage"] for r in table["rows"]] == stages
        assert max(r["max_abs"] for r in table["rows"]) <= bound, table["rows"]


def test_an_unprojected_discriminator_float64(electra_dirs, tmp_path, capsys):
    folder = electra_dirs("ElectraForPreTraining", embedding_size=TINY["hidden_size"])
    rc, table = _parity(folder, tmp_path / "p.json", "--dtype", "float64")
    assert rc == 0, capsys.readouterr().out
    assert max(r["max_abs"] for r in table["rows"]) <= 1e-10
    _, params = jaxbert.from_pretrained(folder)
    assert "embeddings_project" not in params["electra"]


def test_a_wrong_weight_fails_from_its_layer_on(electra_dirs):
    from jaxbert.parity import compare, torch_model
    from jaxbert.parity.inputs import make_inputs

    module, params = jaxbert.from_pretrained(electra_dirs("ElectraForPreTraining"))
    reference = torch_model(module, params)
    layer = params["electra"]["encoder"]["layer"]["1"]["attention"]["self"]["value"]
    layer["kernel"] = layer["kernel"] + 0.05  # the second layer off
    inputs = make_inputs(None, ["a b c ||| d", "e f g h i j k ||| s t"], 32, TINY["vocab_size"])
    report = compare(module, params, inputs, torch_reference=reference)
    ok = {r.stage: r.ok for r in report.rows}
    assert ok["embeddings"] and ok["layer 1"] and not ok["layer 2"]
