"""The embedding demo's pairs (the embedded Python documentation), its command end to end on a tiny BERT,
and the two modernbert-embed recipes (they load, validate, and say what contrastors' files say)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from jaxbert.cli.main import main
from jaxbert.data.embedded import documented_objects
from jaxbert.finetune.kinds import KINDS
from jaxbert.finetune.kinds.embedding import check_run
from jaxbert.finetune.kinds.embedding import demo
from jaxbert.finetune.recipe import load
from tests.helpers.cli import one_line
from tests.helpers.finetune_data import WORDS, make_source


@pytest.fixture(scope="module")
def slice_pairs():
    """Every section of the language reference and the first 1,500 documented stdlib objects (parsing
    the whole stdlib takes a while): candidate pairs as doc_pairs reads them."""
    return list(demo.topic_sections()), list(demo.docstring_splits(itertools.islice(documented_objects(), 1500)))


def _all(train, test):
    return train + test


def test_the_pairs_are_deterministic_leak_free_and_split_by_group(slice_pairs):
    sections, docstrings = slice_pairs
    train, test = demo.doc_pairs(200, 60, sections, docstrings)
    assert (train, test) == demo.doc_pairs(200, 60, sections, docstrings)
    assert len(train) == 200 and len(test) == 60
    assert {r["source"] for r in train} == {"topics", "docstrings"}
    rows = _all(train, test)
    assert len({r["query"] for r in rows}) == len(rows) and len({r["passage"] for r in rows}) == len(rows)
    # no query is found inside another pair's passage (case and spacing aside)
    norm = [(" ".join(r["query"].lower().split()), " ".join(r["passage"].lower().split())) for r in rows]
    for i, (q, _) in enumerate(norm):
        assert not any(q in p for j, (_, p) in enumerate(norm) if j != i), rows[i]
    # the held-out split shares no text and no group (topic, top-level package) with training
    group = {key: g for g, key, _, _ in sections + docstrings}
    assert not {group[r["key"]] for r in train} & {group[r["key"]] for r in test}
    assert not {r["query"] for r in train} & {r["query"] for r in test}
    assert not {r["passage"] for r in train} & {r["passage"] for r in test}
    # a docstring pair's passage is its docstring after the first sentence, never the sentence itself
    one = next(r for r in rows if r["source"] == "docstrings")
    assert one["query"] not in one["passage"]
    # a larger split keeps the smaller one's pairs: chosen by hash, not by the count asked
    bigger, _ = demo.doc_pairs(300, 60, sections, docstrings)
    assert bigger[:200] != [] and {r["key"] for r in train} <= {r["key"] for r in bigger}


def test_duplicates_and_quoted_queries_are_dropped():
    words = " ".join(f"w{i}" for i in range(20))
    docstrings = [("pkg", "pkg:a", "Return the answer to it.", f"{words} a"),
                  ("pkg", "pkg:b", "Return the answer to it.", f"{words} b"),  # same query as a: both dropped
                  ("pkg", "pkg:c", "Open a new door now.", f"{words} c"),
                  ("pkg", "pkg:d", "Open another door later.", f"{words} c"),  # same passage as c: both dropped
                  ("pkg", "pkg:e", "Close the old gate.", f"{words} e, as close the old gate does"),
                  ("pkg", "pkg:f", "Paint the fence red.", f"{words} f: see close the OLD gate."),  # quotes e
                  ("pkg", "pkg:g", "Too short", "one two three")]
    train, test = demo.doc_pairs(1, 0, [], docstrings)
    assert [r["key"] for r in train + test] == ["pkg:f"]  # e is answered word for word by f's passage
    with pytest.raises(demo.InputError, match="the train split has 1 pairs, fewer than 2"):
        demo.doc_pairs(2, 0, [], docstrings)
    sections = list(demo.topic_sections({"t": 'The "x" statement\n*****************\n\n' + words + "\n\nSub part one\n"
                                              "============\n\n" + words + " more"}))
    assert [s[2] for s in sections] == ['The "x" statement', "Sub part one"]
    assert sections[0][3] == words and sections[1][3] == words + " more"


def _pairs(n, seed):
    """A query names a topic and a thing; its passage repeats both amid filler (what the tiny model can learn)."""
    rng, rows = random.Random(seed), []
    topics = ("alpha", "beta", "gamma", "delta")
    for i in range(n):
        topic, thing = rng.choice(topics), rng.choice(WORDS[:20])
        filler = " ".join(rng.choice(WORDS[:20]) for _ in range(4))
        rows.append({"query": f"{topic} {thing}", "passage": f"{filler} {topic} {thing} {topic}",
                     "source": "docstrings", "key": f"k{seed}-{i}"})
    return rows


def test_the_demo_command_reports_retrieval_before_and_after(tmp_path, capsys, monkeypatch):
    src = make_source(tmp_path, dropout=0.0)
    monkeypatch.setattr(demo, "doc_pairs", lambda n_train, n_test: (_pairs(n_train, 0), _pairs(n_test, 1)))
    out_json, work = tmp_path / "demo.json", tmp_path / "kept"
    argv = ["finetune-demo", "--task", "embedding", "--pretrained", str(src), "--pairs", "48", "24",
            "--config", "finetune-embedding-demo", "--set", "data.max_length=16", "--set", "train.epochs=2",
            "--set", "train.per_device_batch_size=16", "--set", "optim.learning_rate=3e-3",
            "--workdir", str(work), "--json", str(out_json)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "24 held-out queries against their 24 pooled passages" in out and "after fine-tuning" in out
    result = json.loads(out_json.read_text())
    assert result["steps"] == 6 and result["pairs"] == [48, 24]  # 2 epochs of 48 // 16 batches
    before, after = result["before"], result["after"]
    assert set(before) == set(after) == {"recall@1", "recall@10", "mrr@10", "ndcg@10"}
    assert after["ndcg@10"] > before["ndcg@10"] + 0.1, (before, after)
    eval_json = json.loads((work / "run" / "eval.json").read_text())  # the figures are the run's own
    evaluations = eval_json["evaluations"]
    assert evaluations[0]["step"] == 0 and evaluations[0]["evals"]["heldout"] == before
    assert evaluations[-1]["step"] == 6 and evaluations[-1]["evals"]["heldout"] == after
    assert (work / "data" / "heldout.jsonl").read_text().count("\n") == 24
    # a second run into the same workdir is refused before anything is read or written
    assert main(argv[:-2] + ["--json", str(tmp_path / "again.json")]) == 2
    one_line(capsys.readouterr(), "finetune-demo", "already holds", str(work / "data" / "train.jsonl"))
    assert not (tmp_path / "again.json").exists()


def test_the_classification_demos_options_are_refused_with_the_embedding_task(capsys):
    for extra, named in ((["--per-kind", "3", "2"], "--per-kind"), (["--tiny-demo", "x"], "--tiny-demo")):
        assert main(["finetune-demo", "--task", "embedding", *extra]) == 2
        one_line(capsys.readouterr(), "finetune-demo", named, "--task embedding")
    assert main(["finetune-demo", "--pairs", "3", "2"]) == 2
    one_line(capsys.readouterr(), "finetune-demo", "--pairs", "--task embedding")


@pytest.mark.parametrize("name,seq,lr,warmup,batch,chunk,dims,columns", [
    ("modernbert-embed-stage1", 128, 2e-4, 700, 16384, 64, [], ["query", "passage"]),
    ("modernbert-embed-stage2", 512, 2e-5, 400, 256, 0, [256, 768], ["query", "passage"] + [f"n{i}" for i in range(1, 8)]),
])
def test_the_modernbert_embed_recipes_load_validate_and_carry_contrastors_numbers(name, seq, lr, warmup, batch, chunk,
                                                                                  dims, columns):
    recipe = load(name)
    options = recipe.options_for(KINDS["embedding"])
    devices = 16  # both recipes are written for 16 devices (v5e:4x4)
    assert recipe.data.max_length == seq and recipe.optim.learning_rate == lr and recipe.optim.warmup_steps == warmup
    assert recipe.train.per_device_batch_size * devices == batch and recipe.train.epochs == 1
    assert recipe.data.batch_per_source  # contrastors reads each batch from one shard of one source
    assert options.temperature == 0.02 and not options.learn_temperature and options.pooling == "mean"
    assert options.matryoshka_dims == dims and not options.symmetric
    assert options.prefixes["query"] == "search_query: " and set(options.prefixes) == set(columns)
    assert all(options.prefixes[c] == "search_document: " for c in columns[1:])
    assert options.mini_batch_size == chunk * devices
    chunks = check_run(options, 768, batch, recipe.train.accum_steps, devices)  # ModernBERT-base: hidden 768
    assert chunks == (batch // (chunk * devices) if chunk else 1)
