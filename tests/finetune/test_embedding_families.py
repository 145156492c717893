"""The embedding kind on families other than BERT: a ModernBERT and an ELECTRA source (each with its
made tokenizer) train a GradCache step with hard negatives through `jaxbert finetune --task embedding`,
and the best/ directory they leave is read by sentence-transformers, which embeds as jaxbert does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxbert.cli.main import main
from tests.finetune.test_embedding_run import _rows
from tests.helpers.finetune_data import make_modernbert_source, write_jsonl

st = pytest.importorskip("sentence_transformers")


def _electra(root):
    from tests.helpers.electra import make_electra_source
    return make_electra_source(root)


@pytest.mark.parametrize("family, make, base", [("modernbert", make_modernbert_source, "ModernBertModel"),
                                                ("electra", _electra, "ElectraModel")])
def test_a_family_with_a_base_model_trains_an_embedding_and_saves_it(tmp_path, capsys, family, make, base):
    src = make(tmp_path / family)
    train = write_jsonl(tmp_path / "train.jsonl", _rows(16, 0))
    work = tmp_path / "run"
    assert main(["finetune", "--task", "embedding", "--model", str(src), "--train", str(train), "--eval", str(train),
                 "--text-columns", "q", "p", "n", "--config", "finetune-tiny", "--workdir", str(work),
                 "--set", "train.steps=1", "--set", "data.max_length=16",
                 "--set", "kinds.embedding.mini_batch_size=8", "--set", "kinds.embedding.pooling=cls"]) == 0
    assert f"-> {base}" in capsys.readouterr().out
    config = json.loads((work / "best" / "config.json").read_text())
    assert config["architectures"] == [base]
    model = st.SentenceTransformer(str(work / "best"), device="cpu")
    texts = ["alpha cat", "beta dog sat on the mat"]
    theirs = model.encode(texts, convert_to_numpy=True)
    from jaxbert import from_pretrained
    from jaxbert.data.tokenizer import load_tokenizer
    from jaxbert.finetune.kinds.embedding.export import encode, read_settings
    settings = read_settings(work / "best")
    assert settings.pooling == "cls"
    module, params = from_pretrained(str(work / "best"))
    ours = encode(module, params, load_tokenizer(str(work / "best")), texts, settings)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    assert np.abs(theirs[0] - theirs[1]).max() > 1e-3
