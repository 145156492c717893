"""`jaxbert parity` on tiny DeBERTa-v2 models saved by transformers, a v2-style config (conv layer, absolute
positions, token types, no buckets, pos_key_proj / pos_query_proj, the lm_predictions MLM layout) and a v3-style
one (share_att_key, log buckets, normed relative embeddings, no absolute positions, cls.predictions): every stage
(embeddings, each layer, the head) of every class within 1e-10 in float64, and the relative positions as
transformers buckets them."""

import json

import numpy as np
import pytest

import jaxbert.cli.main
from tests.helpers.deberta import CLASSES, saved_model

HEAD = {"DebertaV2Model": [], "DebertaV2ForMaskedLM": ["mlm logits"],
        "DebertaV2ForQuestionAnswering": ["start logits", "end logits"]}

@pytest.fixture(scope="session")
def deberta_models():
    """saved_model: the session's tiny models, one per class and style."""
    return saved_model


@pytest.mark.parametrize("style", ["v2", "v3"])
@pytest.mark.parametrize("name", CLASSES)
def test_every_head_float64_within_1e10(deberta_models, tmp_path, capsys, style, name):
    out = tmp_path / "parity.json"
    rc = jaxbert.cli.main.main(["parity", str(deberta_models(name, style)), "--dtype", "float64", "--json", str(out)])
    table = json.loads(out.read_text())
    assert rc == 0, capsys.readouterr().out
    assert [r["stage"] for r in table["rows"]] == ["embeddings", "layer 1", "layer 2", *HEAD.get(name, ["logits"])]
    assert max(r["max_abs"] for r in table["rows"]) <= 1e-10, table["rows"]


def test_gradients_and_a_training_trajectory(deberta_models, tmp_path, capsys):
    folder = str(deberta_models("DebertaV2ForMaskedLM", "v3"))
    rc = jaxbert.cli.main.main(["parity", folder, "--dtype", "float64", "--grad", "--json", str(tmp_path / "g.json")])
    assert rc == 0, capsys.readouterr().out
    assert json.loads((tmp_path / "g.json").read_text())["grad"]["worst_rel"] <= 1e-9
    rc = jaxbert.cli.main.main(["parity", folder, "--train-steps", "3", "--dtype", "float64", "--lr", "1e-3",
                                "--json", str(tmp_path / "t.json")])
    assert rc == 0, capsys.readouterr().out
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert [r["step"] for r in rows] == [1, 2, 3] and len({r["loss_torch"] for r in rows}) == 3
    assert max(r["loss_rel"] for r in rows) <= 1e-9 and max(r["param_rel"] for r in rows) <= 1e-8


def test_a_wrong_relative_index_fails_parity(deberta_models, monkeypatch):
    """The relative terms are read: the index shifted by one row moves the first layer past the tolerance (and
    the stages and inputs reach past the buckets: the unshifted run passes on the same inputs)."""
    import jaxbert
    from jaxbert.model.deberta_v2 import attention
    from jaxbert.parity import compare, numerics, torch_model
    from jaxbert.parity.inputs import make_inputs

    module, params = jaxbert.from_pretrained(deberta_models("DebertaV2ForMaskedLM", "v3"))
    reference = torch_model(module, params)
    inputs = make_inputs(None, ["a b c ||| d", "e f g h i j k l m n o p q r s t u v w x y z ||| a b"], 64, 100,
                         type_vocab_size=0)
    assert compare(module, params, inputs, dtype="float64", torch_reference=reference, jit=False).ok
    right = attention.relative_index
    monkeypatch.setattr(attention, "relative_index", lambda config, length: np.clip(right(config, length) + 1, 0,
                                                                                    2 * config.att_span - 1))
    with numerics("float64"):
        report = compare(module, params, inputs, dtype="float64", torch_reference=reference, jit=False)
    assert next(r.stage for r in report.rows if not r.ok) == "layer 1"


@pytest.mark.parametrize("buckets,max_position", [(256, 512), (8, 16), (0, 16), (64, 128)])
def test_relative_positions_are_transformers_buckets(buckets, max_position):
    """The host-side buckets equal transformers' build_relative_position at every length up to 600."""
    torch = pytest.importorskip("torch")
    from transformers.models.deberta_v2 import modeling_deberta_v2 as ref

    from jaxbert.model.deberta_v2.attention import relative_positions
    for length in (1, 7, 40, 129, 600):
        x = torch.zeros(1, length, 4)
        want = ref.build_relative_position(x, x, bucket_size=buckets, max_position=max_position)[0].numpy()
        assert np.array_equal(relative_positions(length, buckets, max_position), want), length
