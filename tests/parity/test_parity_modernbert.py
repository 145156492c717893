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


def test_a_wrong_weight_fails_from_its_layer_on(tmp_path):
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


def test_train_steps_float64_against_transformers(tmp_path, capsys):
    """`parity --train-steps` on a ModernBertForMaskedLM: jaxbert's train_step + AdamW against
    transformers' ModernBertForMaskedLM + torch.optim.AdamW, float64, within the BERT test's bounds
    (loss 1e-9, every parameter 1e-8). transformers' own MLM loss (logits cast to float32) or its
    float32 RoPE tables would put the loss 1e-8 and the parameters 1e-6 apart: both are taken in
    float64 on the torch side."""
    rc, data = _parity(tmp_path, "ModernBertForMaskedLM", "--train-steps", "3", "--dtype", "float64",
                       "--lr", "1e-3")
    assert rc == 0, capsys.readouterr().out
    assert data["kind"] == "trajectory" and data["ok"] and [r["step"] for r in data["rows"]] == [1, 2, 3]
    assert "ModernBertForMaskedLM" in data["env"]["reference"]
    rows = data["rows"]
    assert max(r["loss_rel"] for r in rows) <= 1e-9 and max(r["param_rel"] for r in rows) <= 1e-8
    assert data["optim"]["warmup_steps"] == 0 and [r["lr"] for r in rows] == pytest.approx([1e-3, 2e-3 / 3, 1e-3 / 3])
    assert len({r["loss_torch"] for r in rows}) == 3  # the weights moved: each step's loss differs
    assert rows[0]["grad_norm_torch"] > 1.0  # above clip_norm 1.0: the clipping is exercised
    assert all(abs(r["grad_norm_jax"] - r["grad_norm_torch"]) <= 1e-9 * r["grad_norm_torch"] for r in rows)


def test_train_steps_fresh_head_and_a_wrong_decay_mask(tmp_path, monkeypatch):
    """A ModernBertModel (no MLM head) trains with a fresh head; decaying ModernBERT's norm weights
    (attn_norm, mlp_norm, final_norm, the head's norm) on the torch side shows after the first real
    update: the reference's decay mask follows their names, not only BERT's *LayerNorm*."""
    import jaxbert
    import jaxbert.parity.torch_reference as ref
    from jaxbert.parity.inputs import make_inputs
    from jaxbert.parity.trajectory import trajectory
    from jaxbert.train.recipe import OptimSection

    tiny_hf("ModernBertModel", seed=5).save_pretrained(tmp_path / "hf")
    module, params = jaxbert.from_pretrained(tmp_path / "hf")
    inputs = make_inputs(None, ["a b c d e f g h i j k l m n ||| o", "p q r ||| s t"], 64, TINY["vocab_size"])
    optim = OptimSection(learning_rate=1e-3, warmup_steps=1, weight_decay=0.1)
    good = trajectory(module, params, inputs, optim, 3, dtype="float64")
    assert good.ok and max(r.param_rel for r in good.rows) <= 1e-8, good.table()
    assert "ModernBertForMaskedLM" in good.env["reference"]
    monkeypatch.setattr(ref, "_no_decay", lambda name: name.endswith("bias"))  # norms decayed
    bad = trajectory(module, params, inputs, optim, 3, dtype="float64")
    assert not bad.ok and bad.rows[0].ok  # step 1 runs at lr 0 (warmup): nothing moved yet
    assert bad.rows[1].param_rel > 1e-6 and "norm" in bad.rows[1].worst_param


@pytest.mark.parametrize("name", ["ModernBertForMaskedLM", "ModernBertForSequenceClassification",
                                  "ModernBertForTokenClassification", "ModernBertForQuestionAnswering",
                                  "ModernBertForMultipleChoice"])
def test_float64_at_trained_scale(tmp_path, capsys, name):
    """Weights at a trained model's scale (initializer_range 0.2: attention far from uniform) and
    heads of 16 dimensions, whose rotary inverse frequencies at theta 10,000 and 160,000 are the
    ones that float32 arithmetic rounds differently under jit and in torch: float64 parity holds to
    1e-10 only when both sides build the tables in float64."""
    torch.manual_seed(3)
    config = transformers.ModernBertConfig(**dict(TINY, hidden_size=64, intermediate_size=48),
                                           initializer_range=0.2, attn_implementation="eager",
                                           num_labels=2 if "Question" in name else 3)
    getattr(transformers, name)(config).eval().save_pretrained(tmp_path / name)
    rc, table = _parity(tmp_path, name, "--dtype", "float64")
    assert rc == 0, capsys.readouterr().out
    assert max(r["max_abs"] for r in table["rows"]) <= 1e-10
