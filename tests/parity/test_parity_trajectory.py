"""Training trajectories: jaxbert's train_step + optimizer against transformers +
torch.optim.AdamW, and the `jaxbert parity --train-steps` command."""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxbert  # noqa: E402
import jaxbert.cli.main  # noqa: E402
from tests.helpers.parity import TINY, _inputs, _random_params  # noqa: E402


def _tiny_mlm():
    module = jaxbert.BertForMaskedLM(TINY)
    return module, _random_params(module)


def test_training_trajectory_float64_and_float32():
    from jaxbert.parity.trajectory import trajectory
    from jaxbert.train.recipe import OptimSection
    module, params = _tiny_mlm()
    inputs = _inputs("BertForMaskedLM", True)
    optim = OptimSection(learning_rate=1e-3, warmup_steps=2)
    r64 = trajectory(module, params, inputs, optim, 6, dtype="float64")
    assert r64.ok, r64.table()
    assert max(r.loss_rel for r in r64.rows) <= 1e-9 and max(r.param_rel for r in r64.rows) <= 1e-8
    losses = [r.loss_torch for r in r64.rows]
    assert len(set(losses)) == 6 and r64.rows[0].lr == 0.0 and r64.rows[2].lr == pytest.approx(1e-3)
    assert r64.rows[1].grad_norm_torch > optim.clip_norm  # clipping is exercised
    r32 = trajectory(module, params, inputs, optim, 6, dtype="float32")
    assert r32.ok and max(r.loss_rel for r in r32.rows) <= 1e-5, r32.table()
    assert max(r.loss_rel for r in r32.rows) > 1e-9  # float32 really ran


def test_training_trajectory_catches_a_wrong_decay_mask(monkeypatch):
    """Decaying LayerNorm params and biases on the PyTorch side (lr 1e-3, decay 0.1)
    is visible in float64 after the first real update."""
    import jaxbert.parity.torch_reference as ref
    from jaxbert.parity.trajectory import trajectory
    from jaxbert.train.recipe import OptimSection
    monkeypatch.setattr(ref, "_no_decay", lambda name: False)
    module, params = _tiny_mlm()
    optim = OptimSection(learning_rate=1e-3, warmup_steps=1, weight_decay=0.1)
    report = trajectory(module, params, _inputs("BertForMaskedLM", True), optim, 3, dtype="float64")
    assert not report.ok
    assert report.rows[0].ok and report.rows[1].param_rel > 1e-6
    assert "LayerNorm" in report.rows[1].worst_param or "bias" in report.rows[1].worst_param


def test_parity_command_train_steps(tmp_path):
    module = jaxbert.BertForPreTraining(TINY)
    jaxbert.save_pretrained(tmp_path / "hf", module, _random_params(module), format="hf")
    out = tmp_path / "t.json"
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "hf"), "--train-steps", "3", "--dtype", "float64",
                                  "--lr", "1e-3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["kind"] == "trajectory" and data["ok"] and [r["step"] for r in data["rows"]] == [1, 2, 3]
    assert data["optim"]["warmup_steps"] == 0 and data["rows"][1]["loss_rel"] <= 1e-9
