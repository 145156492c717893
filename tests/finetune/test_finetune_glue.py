"""`jaxbert glue` end to end: all eight tasks of a made GLUE_DIR with a tiny model and recipe, the
table and JSON, the average of the main metrics, and missing folders refused before training."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from jaxbert.cli.main import main
from jaxbert.finetune.glue_run import GLUE_EIGHT, parse_tasks
from jaxbert.finetune.metrics import GLUE_MAIN
from tests.helpers.finetune_data import make_source, write_glue_dir

TINY = ["--config", "finetune-tiny", "--set", "data.max_length=32", "--set", "train.epochs=1"]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


# compile_cache (tests/conftest.py): six of the eight tasks compile the same binary-classification step
def test_glue_runs_all_eight_tasks_and_averages_the_main_metrics(src, tmp_path, capsys, compile_cache):
    data = write_glue_dir(tmp_path / "glue_data", n_train=32, n_dev=16)
    out = tmp_path / "glue.json"
    rc = main(["glue", str(src), "--data", str(data), "--workdir", str(tmp_path / "runs"), "--json", str(out), *TINY])
    assert rc == 0
    table = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert list(report["tasks"]) == list(GLUE_EIGHT)
    for name, task in report["tasks"].items():
        eval_name, metric = GLUE_MAIN[name]
        assert task["main"] == [eval_name, metric]
        assert -1.0 <= task["score"] <= 1.0 and task["score"] == task["evals"][eval_name][metric]
        line = next(l for l in table.splitlines() if l.startswith(name + " "))
        assert f"{task['score']:.4f}" in line
    mnli = report["tasks"]["mnli"]["evals"]
    assert {"matched", "mismatched"} <= set(mnli) and "mismatched accuracy" in table
    assert report["average"] == pytest.approx(statistics.fmean(t["score"] for t in report["tasks"].values()))
    assert f"{report['average']:.4f}" in next(l for l in table.splitlines() if l.startswith("average "))
    assert math.isfinite(report["average"]) and report["protocol"]["seeds"] == 1


def test_missing_task_folders_are_named_before_anything_trains(src, tmp_path, capsys):
    data = write_glue_dir(tmp_path / "glue_data", n_train=4, n_dev=2, skip=("QQP", "MNLI"))
    runs = tmp_path / "runs"
    rc = main(["glue", str(src), "--data", str(data), "--workdir", str(runs), *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "qqp" in err[0] and "mnli" in err[0] and "--tasks" in err[0], err
    assert not runs.exists()


def test_tasks_subset_and_wnli():
    assert parse_tasks("SST-2,cola") == ("cola", "sst2")
    with pytest.raises(Exception, match="WNLI"):
        parse_tasks("wnli")


def test_glue_and_finetune_choose_the_recipe_for_a_model_by_one_rule_and_say_so(src, tmp_path, capsys, compile_cache):
    data = write_glue_dir(tmp_path / "glue_data", n_train=8, n_dev=4)
    quick = ["--set", "data.max_length=32", "--set", "train.steps=1"]
    assert main(["glue", str(src), "--data", str(data), "--tasks", "sst2", "--workdir", str(tmp_path / "g"),
                 "--json", str(tmp_path / "g.json"), *quick]) == 0
    out = capsys.readouterr().out
    assert f"glue: 1 task(s) x 1 seed(s) into {tmp_path / 'g'}/<task>/seed-<n>" in out  # where it writes
    glue_said = [line for line in out.splitlines() if line.startswith("recipe ")]
    assert main(["finetune", "--task", "glue/sst2", "--model", str(src), "--data", str(data),
                 "--workdir", str(tmp_path / "f"), *quick]) == 0
    finetune_said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("recipe ")]
    # the model has hidden size 32: both verbs pick finetune-tiny (not finetune-glue's lr 2e-5), in the same words
    assert glue_said == finetune_said == [f"recipe finetune-tiny: {src} is a small model (hidden size 32); "
                                          "finetune-glue's learning rate is made for BERT-base and barely moves "
                                          "it (--config finetune-glue to use it anyway)"]
    assert json.loads((tmp_path / "g.json").read_text())["protocol"]["recipe"] == "finetune-tiny"
