"""Embedding models out and in: jaxbert writes a sentence-transformers directory that
sentence-transformers' own reader loads and that embeds as jaxbert does (within 1e-5), with the
column prefixes as its prompts; `predict_file` writes the embeddings as JSONL; a
sentence-transformers directory (all-MiniLM-L6-v2's, made by sentence-transformers) is recognised
and embedded by jaxbert as sentence-transformers embeds it; the reader and options refuse bad input."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.engine.recipe import RecipeError
from jaxbert.finetune import kinds
from jaxbert.finetune.kinds.embedding.export import (
    Settings,
    encode,
    is_embedding_model,
    predict_file,
    read_settings,
    write_sentence_transformers,
)
from jaxbert.finetune.kinds.embedding import (
    check_run,
    embedding_features,
    negatives_line,
    read_embedding,
)
from jaxbert.finetune.row_files import TaskDataError
from jaxbert.packaged import minilm_folder

st = pytest.importorskip("sentence_transformers")
TEXTS = ["how do cats sleep", "paris is the capital of france", "sorted returns a new list", "rain"]


def _tiny(hidden=32):
    cfg = jaxbert.BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, max_position_embeddings=64)
    module = jaxbert.build_model("BertModel", cfg)
    ids = jnp.ones((1, 8), jnp.int32)
    return module, module.init(jax.random.key(3), ids, ids * 0, ids)["params"]


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_the_written_directory_loads_in_sentence_transformers_and_embeds_as_jaxbert(tmp_path, capsys, pooling):
    module, params = _tiny()
    settings = Settings(pooling, True, {"query": "search_query: ", "passage": "search_document: "}, 48)
    out = write_sentence_transformers(tmp_path / "st", module.config, "BertModel", params, minilm_folder(), settings)
    assert is_embedding_model(out) and read_settings(out) == settings
    model = st.SentenceTransformer(str(out), device="cpu")
    assert model.max_seq_length == 48 and model.prompts["query"] == "search_query: "
    theirs = model.encode(TEXTS, prompt_name="query", convert_to_numpy=True)
    ours = encode(module, params, load_tokenizer(minilm_folder()), TEXTS, settings, prompt="search_query: ")
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    assert np.allclose(np.linalg.norm(theirs, axis=1), 1.0)
    plain = model.encode(TEXTS, convert_to_numpy=True)
    assert np.abs(plain - theirs).max() > 1e-3  # the prompt is put in front
    # predict: one row per input with its embedding, the column's prompt
    rows = tmp_path / "in.jsonl"
    rows.write_text("".join(json.dumps({"query": t}) + "\n" for t in TEXTS))
    assert predict_file(out, rows, tmp_path / "pred.jsonl", "query") == len(TEXTS)
    got = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert [g["query"] for g in got] == TEXTS
    np.testing.assert_allclose(np.array([g["embedding"] for g in got]), theirs, atol=1e-5, rtol=0)
    # jaxbert evaluate --label-column: Spearman of the pairs' cosines, as scipy ranks sentence-transformers' cosines
    from scipy.stats import spearmanr

    from jaxbert.cli.main import main
    pairs = [(TEXTS[i], TEXTS[j], float((i * 3 + j) % 5)) for i in range(4) for j in range(4) if i != j]
    sts = tmp_path / "sts.jsonl"
    sts.write_text("".join(json.dumps({"query": a, "passage": b, "score": s}) + "\n" for a, b, s in pairs))
    assert main(["evaluate", str(out), "--eval", str(sts), "--text-columns", "query", "passage",
                 "--label-column", "score"]) == 0
    printed = float(capsys.readouterr().out.split("spearman")[1].split()[0])
    a = model.encode([p[0] for p in pairs], prompt_name="query", convert_to_numpy=True)
    b = model.encode([p[1] for p in pairs], prompt_name="passage", convert_to_numpy=True)
    expected = spearmanr(np.sum(a * b, 1), [p[2] for p in pairs]).statistic
    assert printed == pytest.approx(expected, abs=1e-4)


def test_a_sentence_transformers_model_is_recognised_and_embedded_as_sentence_transformers_does():
    folder = minilm_folder()
    assert is_embedding_model(folder)
    settings = read_settings(folder)
    assert (settings.pooling, settings.normalize, settings.max_seq_length) == ("mean", True, 256)
    module, params = jaxbert.from_pretrained(folder, "BertModel")
    ours = encode(module, params, load_tokenizer(folder), TEXTS[:2], settings)
    theirs = st.SentenceTransformer(folder, device="cpu").encode(TEXTS[:2], convert_to_numpy=True)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def test_a_plain_transformers_directory_is_no_embedding_model(tmp_path):
    module, params = _tiny()
    jaxbert.save_pretrained(tmp_path / "plain", module, params)
    assert not is_embedding_model(tmp_path / "plain")


def test_rows_features_and_bad_input(tmp_path):
    good = tmp_path / "train.jsonl"
    good.write_text(json.dumps({"q": "a cat", "p": "the cat sat", "n": "a dog ran"}) + "\n"
                    + json.dumps({"q": "rain", "p": "it rains in spain", "n": "sunny"}) + "\n")
    examples, labels = kinds.get("embedding").read(good, text_columns=("q", "p", "n"))
    assert labels is None and examples[1].texts == ("rain", "it rains in spain", "sunny")
    feats = embedding_features(examples, load_tokenizer(minilm_folder()), 16, {"q": "query: "})
    assert feats.arrays["input_ids"].shape[:2] == (2, 3)
    tok = load_tokenizer(minilm_folder())
    assert feats.arrays["input_ids"][0, 0, 1:4].tolist() == tok.encode("query: a cat").ids[1:4]  # prefix in front
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({"q": "a", "p": "b"}) + "\n" + json.dumps({"q": "a"}) + "\n")
    with pytest.raises(TaskDataError, match=r"missing.jsonl.*\bp\b"):
        read_embedding(missing, ["q", "p"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"q": "a", "p": "  "}) + "\n")
    with pytest.raises(TaskDataError, match=r"empty.jsonl: line 1 has an empty p"):
        read_embedding(empty, ["q", "p"])
    with pytest.raises(TaskDataError, match="ANCHOR POSITIVE"):
        read_embedding(good, ["q"])
    kind = kinds.get("embedding")
    with pytest.raises(RecipeError, match=r"kinds.embedding.temperature: 0.0 must be > 0"):
        kind.options({"temperature": 0.0}, "kinds.embedding.")
    opts = kind.options({"matryoshka_dims": [64, 8], "mini_batch_size": 3}, "kinds.embedding.")
    with pytest.raises(RecipeError, match=r"matryoshka_dims: 64 is above the model's hidden size 32"):
        check_run(opts, 32, 12, 1)
    opts = kind.options({"mini_batch_size": 5}, "kinds.embedding.")
    with pytest.raises(RecipeError, match=r"mini_batch_size: 5 does not divide the global batch 12"):
        check_run(opts, 32, 12, 1)
    with pytest.raises(RecipeError, match=r"train.accum_steps: 2"):
        check_run(kind.options({}), 32, 12, 2)
    assert check_run(kind.options({"mini_batch_size": 4}), 32, 12, 1) == 3
    line = negatives_line(kind.options({}), 12, 3, 3)
    assert "24 candidates" in line and "12 hard negatives" in line and "3 GradCache chunks of 4" in line
