"""The end-to-end rows (finetune-e2e, predict) run on a tiny made model and give well-formed figures."""

import argparse
import dataclasses

import pytest

from jaxbert.bench import e2e, harness
from jaxbert.finetune.glue import load_glue


def test_the_made_task_is_in_the_glue_layout_jaxbert_reads(tmp_path):
    size = dataclasses.replace(e2e.QUICK, n_train=40, n_dev=10)
    paths = e2e.write_task(tmp_path, size)
    train, evals, labels = load_glue("sst2", paths["glue"])
    assert len(train) == 40 and len(evals["dev"]) == 10 and labels == ("negative", "positive")  # GLUE SST-2 names its classes
    assert len((tmp_path / "predict-inputs.jsonl").read_text().splitlines()) == 10
    assert e2e.steps_for(size) == 2 * size.epochs  # 40 examples in batches of 32: two steps an epoch
    assert e2e.task_rows(5, 1) == e2e.task_rows(5, 1)  # the same task on every run


def test_the_e2e_rows_run_end_to_end_on_a_tiny_model(monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.setattr(e2e, "QUICK", dataclasses.replace(e2e.QUICK, n_train=64, n_dev=32, epochs=1, max_length=32))
    args = argparse.Namespace(quick=True, repeats=None, rounds=None, e2e_rounds=1, dtype=None, attention=None,
                              malloc="keep", no_torch=False, only=["finetune-e2e", "predict"])
    bench = harness.Bench(args)
    bench.run()
    rows = {(r.work, r.contender): r for r in bench.records}
    assert sorted(rows) == [("finetune-e2e/tiny", "jaxbert"), ("finetune-e2e/tiny", "torch-eager"),
                            ("predict/tiny", "jaxbert"), ("predict/tiny", "torch-eager")]
    for (work, name), r in rows.items():
        assert r.unit == "s" and 0 < r.min <= r.median <= r.max
        if work.startswith("finetune-e2e"):
            assert r.extra["steps"] == 2 and r.extra["steps_per_s"] > 0 and 0 <= r.extra["dev_accuracy"] <= 1
        else:
            assert r.extra["examples"] == 32 and r.extra["examples_per_s"] > 0
        if name == "torch-eager":
            assert r.ratio.median > 0 and r.ratio.rounds == 1 and r.ratio.verdict == "too few rounds"
    assert 0 <= rows[("predict/tiny", "torch-eager")].extra["same_label_share"] <= 1
    assert capsys.readouterr().out.startswith("machine: ")
