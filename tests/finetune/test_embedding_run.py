"""`jaxbert finetune --task embedding` end to end on a tiny BERT (no download): rows of a query, its
passage and a hard negative; GradCache chunks; a learned temperature; retrieval improves; WORKDIR/best is a
sentence-transformers directory that embeds as jaxbert does; the finished run's workdir is not trained again;
bad input refused in one line, nothing written."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from jaxbert.cli.main import main
from tests.helpers.cli import one_line
from tests.helpers.finetune_data import WORDS, make_source, write_jsonl

st = pytest.importorskip("sentence_transformers")
TOPICS = ("alpha", "beta", "gamma", "delta")


def _rows(n, seed):
    """A query names a topic word and an object; its passage repeats both; the hard negative shares the object."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        topic, other = rng.sample(TOPICS, 2)
        thing = rng.choice(WORDS[:20])
        filler = " ".join(rng.choice(WORDS[:20]) for _ in range(4))
        rows.append({"q": f"{topic} {thing}", "p": f"{filler} {topic} {thing} {topic}",
                     "n": f"{filler} {other} {thing} {other}"})
    return rows


def test_an_embedding_model_trains_and_is_saved_for_sentence_transformers(tmp_path, capsys):
    src = make_source(tmp_path, dropout=0.0)
    train = write_jsonl(tmp_path / "train.jsonl", _rows(64, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", _rows(24, 1))
    work = tmp_path / "run"
    args = ["finetune", "--task", "embedding", "--model", str(src), "--train", str(train), "--eval", str(dev),
            "--text-columns", "q", "p", "n", "--config", "finetune-tiny", "--workdir", str(work),
            "--set", "train.epochs=3", "--set", "data.max_length=16",
            "--set", "kinds.embedding.mini_batch_size=8", "--set", "kinds.embedding.prefixes={q: 'query: '}",
            "--set", "kinds.embedding.learn_temperature=true"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "each anchor scores 32 candidates per step (16 positives and 16 hard negatives" in out
    assert "2 GradCache chunks of 8" in out
    history = json.loads((work / "eval.json").read_text())["evaluations"]
    first, last = history[0]["evals"]["dev"]["ndcg@10"], max(h["evals"]["dev"]["ndcg@10"] for h in history)
    assert [h["step"] for h in history] == [0, 4, 8, 12] and last > first + 0.1, (first, last)
    temperatures = [h["temperature"] for h in history[1:]]  # learned: it moves from 0.05, step after step
    assert abs(temperatures[0] - 0.05) > 1e-4 and len(set(temperatures)) == 3
    model = st.SentenceTransformer(str(work / "best"), device="cpu")
    assert model.prompts["q"] == "query: "
    texts = [r["q"] for r in _rows(4, 2)]
    theirs = model.encode(texts, prompt_name="q", convert_to_numpy=True)
    from jaxbert import from_pretrained
    from jaxbert.data.tokenizer import load_tokenizer
    from jaxbert.finetune.kinds.embedding.export import encode, read_settings
    module, params = from_pretrained(str(work / "best"))
    ours = encode(module, params, load_tokenizer(str(work / "best")), texts, read_settings(work / "best"), "query: ")
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    # jaxbert predict: the model is known by its sentence-transformers files; it embeds the column it was
    # trained on first (q) with that column's prompt
    pred = tmp_path / "pred.jsonl"
    assert main(["predict", str(work / "best"), str(dev), "--out", str(pred)]) == 0
    got = [json.loads(line) for line in pred.read_text().splitlines()]
    dev_rows = _rows(24, 1)
    assert [g["q"] for g in got] == [r["q"] for r in dev_rows]
    expected = model.encode([r["q"] for r in dev_rows], prompt_name="q", convert_to_numpy=True)
    np.testing.assert_allclose(np.array([g["embedding"] for g in got]), expected, atol=1e-5, rtol=0)
    # jaxbert evaluate: the best evaluation's retrieval figures again, from the saved directory
    capsys.readouterr()
    assert main(["evaluate", str(work / "best"), "--eval", str(dev)]) == 0
    printed = dict(line.split() for line in capsys.readouterr().out.strip().splitlines())
    best = json.loads((work / "eval.json").read_text())["best"]["evals"]["dev"]
    assert float(printed["ndcg@10"]) == pytest.approx(best["ndcg@10"], abs=1e-4)
    # the same run again in its workdir: it is finished (its last checkpoint is the last step); nothing retrained
    kept = {p: p.read_bytes() for p in sorted((work / "best").rglob("*")) if p.is_file()}
    eval_json = (work / "eval.json").read_bytes()
    capsys.readouterr()
    assert main(args) == 0
    assert f"{work} is finished at step 12" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in sorted((work / "best").rglob("*")) if p.is_file()} == kept
    assert (work / "eval.json").read_bytes() == eval_json


@pytest.fixture(scope="module")
def small_source(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


@pytest.mark.parametrize("setting, needle", [
    ("kinds.embedding.mini_batch_size=5", "mini_batch_size: 5 does not divide the global batch 16"),
    ("kinds.embedding.temperature=0", "kinds.embedding.temperature: 0"),
    ("kinds.embedding.matryoshka_dims=[64]", "matryoshka_dims: 64 is above the model's hidden size 32"),
    ("train.accum_steps=2", "train.accum_steps: 2"),
    ("kinds.embedding.pooling=max", "kinds.embedding.pooling: 'max' is not one of mean, cls, last"),
])
def test_bad_settings_are_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, small_source, setting, needle):
    train = write_jsonl(tmp_path / "train.jsonl", _rows(32, 0))
    code = main(["finetune", "--task", "embedding", "--model", str(small_source), "--train", str(train), "--eval",
                 str(train), "--text-columns",
                 "q", "p", "--config", "finetune-tiny", "--workdir", str(tmp_path / "run"), "--set", setting])
    assert code == 2
    one_line(capsys.readouterr(), "finetune", needle)
    assert not (tmp_path / "run").exists()
