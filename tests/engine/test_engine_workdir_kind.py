"""A run writes only into a new or empty folder, or into jaxbert's own workdir of its kind; the kind is
recorded, and nothing is written before the checks pass."""

from __future__ import annotations

import json

import pytest

from jaxbert import workdir as workdir_lib
from jaxbert.errors import InputError
from jaxbert.finetune import loop as ft_loop
from jaxbert.finetune.predict import evaluate_file, predict_file
from jaxbert.finetune.recipe import load as load_ft
from jaxbert.finetune.task_data import parse_task
from jaxbert.train import recipe as R
from jaxbert.train.loop import train_and_evaluate
from jaxbert.workdir import WorkdirError
from tests.helpers.finetune_data import classification_rows, make_source, write_jsonl
from tests.helpers.runs import TINY

QUIET = lambda m: None  # noqa: E731
# the tests fine-tune/train the same tiny model again and again: compiled once (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("compile_cache")
USER_RECIPE = "# my own notes on this experiment\nlr: 3e-5   # tried 5e-5 first\n"


def _tiny(steps=4):
    data = json.loads(json.dumps(TINY))
    data["train"]["steps"] = steps
    return R.from_dict(data)


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", classification_rows(48, seed=5))


def test_a_folder_with_the_users_own_recipe_and_eval_is_refused_untouched(src, train_file, tmp_path):
    wd = tmp_path / "experiment"
    wd.mkdir()
    (wd / "recipe.yaml").write_text(USER_RECIPE)
    (wd / "eval.json").write_text('{"mine": 1}\n')
    before = _snapshot(wd)
    with pytest.raises(WorkdirError, match=r"holds eval\.json, recipe\.yaml, which jaxbert did not write"):
        ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=2"]), parse_task("classification", train_file,
                                                                                 [train_file]), src, wd, log=QUIET)
    with pytest.raises(WorkdirError, match="jaxbert did not write"):
        train_and_evaluate(_tiny(), wd)
    assert _snapshot(wd) == before  # byte for byte, and nothing added


def test_the_kind_is_recorded_and_a_run_of_the_other_kind_is_refused(src, train_file, tmp_path):
    pre, ft = tmp_path / "pre", tmp_path / "ft"
    assert train_and_evaluate(_tiny(), pre)["status"] == "finished"
    assert workdir_lib.kind(pre) == workdir_lib.PRETRAINING
    spec = parse_task("classification", train_file, [train_file])
    with pytest.raises(WorkdirError, match="is a pretraining workdir"):
        ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=2"]), spec, src, pre, log=QUIET)
    ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=2"]), spec, src, ft, log=QUIET)
    assert workdir_lib.kind(ft) == workdir_lib.FINETUNING
    # evaluate / predict read the kind: the fine-tuning workdir stands for its best model
    assert evaluate_file(ft, "classification", train_file) == evaluate_file(ft / "best", "classification", train_file)
    assert predict_file(ft, train_file)[:3] == predict_file(ft / "best", train_file)[:3]
    with pytest.raises(WorkdirError, match="is a finetuning workdir"):
        train_and_evaluate(_tiny(), ft)
    # a workdir of an older jaxbert (no kind file) is still known by its checkpoints, and resumes
    (pre / workdir_lib.KIND_FILE).unlink()
    (ft / workdir_lib.KIND_FILE).unlink()
    assert workdir_lib.kind(pre) == workdir_lib.PRETRAINING and workdir_lib.kind(ft) == workdir_lib.FINETUNING
    assert train_and_evaluate(_tiny(6), pre)["step"] == 6


def test_a_refused_resume_leaves_the_recipe_as_it_was(src, tmp_path):
    rows = classification_rows(48, seed=6)
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    spec = parse_task("classification", train, [train])
    wd = tmp_path / "wd"
    ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=4"]), spec, src, wd, stop_at=2, log=QUIET)
    saved = (wd / "recipe.yaml").read_bytes()
    write_jsonl(train, rows[:40])  # other data
    with pytest.raises(InputError, match="cannot be resumed"):
        ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=4", "optim.learning_rate=1e-3"]),
                         parse_task("classification", train, [train]), src, wd, log=QUIET)
    assert (wd / "recipe.yaml").read_bytes() == saved


def test_a_users_own_best_folder_is_refused_before_any_step(src, train_file, tmp_path):
    wd = tmp_path / "wd"
    spec = parse_task("classification", train_file, [train_file])
    ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=4"]), spec, src, wd, stop_at=1, log=QUIET)
    import shutil
    shutil.rmtree(wd / "best", ignore_errors=True)
    (wd / "best").mkdir()
    (wd / "best" / "my_model.txt").write_text("mine")
    metrics = (wd / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError, match=r"best: exists and is not a model jaxbert exported"):
        ft_loop.finetune(load_ft("finetune-tiny", ["train.steps=4"]), spec, src, wd, log=QUIET)
    assert (wd / "best" / "my_model.txt").read_text() == "mine"
    assert (wd / "metrics.jsonl").read_bytes() == metrics  # nothing appended: refused before training


def test_a_refused_train_leaves_no_folder_marker_or_lock(tmp_path, monkeypatch, capsys):
    from jaxbert.cli.main import main
    monkeypatch.chdir(tmp_path)  # the recipe's default workdir, runs/bert-base-phase1, is under the cwd
    assert main(["train", "--config", "bert-base-phase1"]) == 2
    assert "data.dir: data/bert-128 does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # not runs/, not runs/bert-base-phase1/.jaxbert-workdir, no lock


def test_a_refused_run_in_the_users_empty_folder_leaves_the_folder_empty(tmp_path):
    data = json.loads(json.dumps(TINY))
    data["data"] = {"source": "prepared", "dir": str(tmp_path / "no-such-data"), "seq_len": 16}
    wd = tmp_path / "mine"
    wd.mkdir()
    with pytest.raises(InputError, match="no-such-data does not exist"):
        train_and_evaluate(R.from_dict(data), wd)
    assert wd.is_dir() and list(wd.iterdir()) == []  # the user's folder stays, as it was
    train_and_evaluate(_tiny(2), wd)  # a run that works keeps its marker
    assert workdir_lib.kind(wd) == workdir_lib.PRETRAINING and (wd / workdir_lib.KIND_FILE).exists()
