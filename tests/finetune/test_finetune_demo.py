"""The fine-tuning demo's task (docstring kinds from the embedded corpus) and its three-model
runner on a tiny stand-in; the real 5-minute demo is not run here."""

from __future__ import annotations

import collections

import pytest

from jaxbert.cli.main import main
from jaxbert.data.embedded import documented_objects
from jaxbert.finetune.demo import KINDS, Contender, docstring_task, first_paragraph, fresh_copy, run_demo
from jaxbert.finetune.recipe import load
from tests.helpers.finetune_data import make_source


@pytest.fixture(scope="module")
def objects():
    return list(documented_objects())


def test_the_docstring_task_is_deterministic_balanced_and_leak_free(objects):
    train, test = docstring_task(60, 30, objects=objects)
    assert (train, test) == docstring_task(60, 30, objects=objects)
    assert collections.Counter(r["label"] for r in train) == {k: 60 for k in KINDS}
    assert collections.Counter(r["label"] for r in test) == {k: 30 for k in KINDS}
    assert not {r["text"] for r in train} & {r["text"] for r in test}
    assert not {(r["module"], r["qualname"]) for r in train} & {(r["module"], r["qualname"]) for r in test}
    assert len({r["text"] for r in train}) == len(train)
    # a larger split keeps the smaller one's rows: the choice is by hash, not by the count asked
    bigger, _ = docstring_task(90, 30, objects=objects)
    assert {r["text"] for r in train} <= {r["text"] for r in bigger}


def test_a_text_under_two_objects_lands_in_one_split_and_two_kinds_drop_it():
    objects = [(f"m{i}", f"f{i}", ("module", "class", "function")[i % 3], f"text number {i} here.\n\nmore")
               for i in range(600)]
    objects += [(f"dup{i}", "g", "function", "text number 2 here.") for i in range(40)]  # same text, many objects
    objects += [("x", "C", "class", "text number 0 here.")]  # text 0 is a module's too: two kinds
    train, test = docstring_task(20, 5, objects=objects)
    texts = [r["text"] for r in train + test]
    assert "text number 0 here." not in texts and len(texts) == len(set(texts))
    assert first_paragraph("one two\nthree\n\nfour") == "one two three"


def test_the_three_model_runner_on_a_tiny_stand_in(tmp_path):
    src = make_source(tmp_path)
    fresh = fresh_copy(src, src, tmp_path / "fresh", seed=0)
    rows = [{"text": f"{kind} {'alpha' if kind == 'module' else 'beta' if kind == 'class' else 'gamma'} cat sat",
             "label": kind} for kind in KINDS for _ in range(8)]
    recipe = load("finetune-demo", ["data.max_length=32", "train.epochs=1"])
    results = run_demo([Contender("a", str(src)), Contender("b", str(fresh), str(src))], recipe, rows, rows[::2],
                       log=lambda m: None)
    assert [r["name"] for r in results] == ["a", "b"]
    assert all(0 <= r["accuracy"] <= 1 and 0 <= r["macro_f1"] <= 1 and r["steps"] == 2 for r in results)


def test_the_demo_without_a_tiny_demo_says_how_to_make_it(tmp_path, capsys):
    rc = main(["finetune-demo", "--tiny-demo", str(tmp_path / "nothing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "jaxbert train" in err[0]


@pytest.mark.parametrize("keep", [False, True], ids=["temporary", "kept"])
def test_the_demo_says_where_its_runs_go(tmp_path, capsys, monkeypatch, keep):
    from jaxbert.cli import finetune_demo as cli
    seen = {}

    def fake_run_demo(contenders, recipe, train, test, workdir, log):  # the three runs, not trained here
        seen["workdir"] = workdir
        return [{"name": c.name, "accuracy": 0.5, "macro_f1": 0.5, "seconds": 1.0} for c in contenders]
    monkeypatch.setattr(cli, "run_demo", fake_run_demo)
    monkeypatch.setattr(cli, "fresh_copy", lambda *a, **k: tmp_path / "fresh")
    monkeypatch.setattr(cli.workdir_lib, "is_workdir", lambda p: True)
    monkeypatch.setattr(cli.workdir_lib, "tokenizer_path", lambda p: tmp_path)
    monkeypatch.setattr(cli, "docstring_task", lambda n_train, n_test: ([], []))  # the stdlib scan takes a while
    argv = ["finetune-demo", "--pretrained", str(tmp_path), "--per-kind", "2", "1"]
    if keep:
        argv += ["--workdir", str(tmp_path / "kept")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    if keep:
        assert f"runs kept in {tmp_path / 'kept'}" in out and seen["workdir"] == str(tmp_path / "kept")
    else:
        assert "runs in a temporary folder, removed at the end (--workdir DIR keeps them)" in out
        assert seen["workdir"] is None
