"""A resumed fine-tune trains on what it was saved with (a fingerprint of the data), keeps one metrics row
per step after a kill, and a source fine-tuned for other labels gets a fresh head, said so."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from jaxbert.engine.metrics_log import MetricsWriter
from jaxbert.errors import InputError
from jaxbert.finetune import loop as loop_lib
from jaxbert.finetune.model import load_task_model
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from tests.helpers.finetune_data import classification_rows, make_source, token_rows, write_jsonl

QUIET = lambda m: None  # noqa: E731
# the tests fine-tune/train the same tiny model again and again: compiled once (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("compile_cache")


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


def test_a_resume_on_flipped_labels_of_the_same_size_is_refused_naming_the_content(src, tmp_path):
    rows = classification_rows(64, seed=1)
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    recipe = load("finetune-tiny", ["train.steps=6", "checkpoint.every_steps=2"])
    first = loop_lib.finetune(recipe, parse_task("classification", train, [train]), src, tmp_path / "wd",
                              stop_at=3, log=QUIET)
    assert first["status"] == "stopped"
    flipped = [{**r, "label": "water" if r["label"] == "fruit" else "fruit"} for r in rows]
    write_jsonl(train, flipped)  # same file, same size, same labels: other content
    with pytest.raises(InputError, match=r"the training data's content: saved '[0-9a-f]{16}', now '[0-9a-f]{16}'"):
        loop_lib.finetune(recipe, parse_task("classification", train, [train]), src, tmp_path / "wd", log=QUIET)
    write_jsonl(train, rows)  # the data it was saved with: resumes and finishes
    done = loop_lib.finetune(recipe, parse_task("classification", train, [train]), src, tmp_path / "wd", log=QUIET)
    assert done["status"] == "finished" and done["step"] == 6


def test_a_resume_with_another_batch_size_names_the_batch(src, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(64, seed=2))
    spec = parse_task("classification", train, [train])
    loop_lib.finetune(load("finetune-tiny", ["train.steps=6"]), spec, src, tmp_path / "wd", stop_at=2, log=QUIET)
    with pytest.raises(InputError, match=r"saved with another batch size \(per_device_batch_size 16, .*: 4 steps per epoch, 8 now"):
        loop_lib.finetune(load("finetune-tiny", ["train.steps=6", "train.per_device_batch_size=8"]), spec, src,
                          tmp_path / "wd", log=QUIET)


def test_metrics_rows_of_steps_a_killed_run_lost_are_written_once(src, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(64, seed=3))
    spec = parse_task("classification", train, [train])
    recipe = load("finetune-tiny", ["train.steps=8", "checkpoint.every_steps=4", "train.log_every=1"])
    loop_lib.finetune(recipe, spec, src, tmp_path / "wd", stop_at=6, log=QUIET)
    # As if killed after step 6 was logged but before its checkpoint landed: only step 4's remains.
    shutil.rmtree(tmp_path / "wd" / "checkpoints" / "6")
    rows_before = [json.loads(x) for x in (tmp_path / "wd" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows_before) == 6
    loop_lib.finetune(recipe, spec, src, tmp_path / "wd", log=QUIET)
    rows = [json.loads(x) for x in (tmp_path / "wd" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r["step"] for r in rows if "loss" in r]
    assert train_rows == list(range(1, 9))  # steps 5 and 6 replayed, each kept once


def test_the_writer_drops_only_rows_after_the_resumed_step(tmp_path):
    lines = [json.dumps({"step": s, "loss": float(s)}) for s in range(1, 8)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 8, "lo')  # a torn last row
    writer = MetricsWriter(tmp_path, resume_from=5)
    writer.write(6, {"loss": 60.0})
    writer.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 60.0)]


def test_a_token_model_fine_tuned_for_other_labels_gets_a_fresh_head(src, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", token_rows(48, seed=4))
    first = loop_lib.finetune(load("finetune-tiny", ["train.steps=4"]), parse_task("tokens", train, [train]), src,
                              tmp_path / "wd", log=QUIET)
    tagged = tmp_path / "wd" / "best"
    old = load_task_model(tagged, "tokens", first_labels := _labels(tagged))
    assert old.fresh == []  # same labels: its head is kept, nothing is new
    renamed = [f"{x}-NEW" for x in first_labels]  # as many labels, other names: the shapes would fit
    new = load_task_model(tagged, "tokens", renamed)
    assert sorted(f.split(" ")[0] for f in new.fresh) == ["classifier.bias", "classifier.kernel"]
    assert "SRC's head had labels" in new.fresh[0] and "initialised fresh" in new.describe(tagged)
    kept = np.asarray(old.params["classifier"]["kernel"])
    assert not np.allclose(np.asarray(new.params["classifier"]["kernel"]), kept)
    np.testing.assert_array_equal(np.asarray(new.params["bert"]["encoder"]["layer"]["0"]["output"]["dense"]["kernel"]),
                                  np.asarray(old.params["bert"]["encoder"]["layer"]["0"]["output"]["dense"]["kernel"]))
    assert first["status"] == "finished"


def _labels(model_dir) -> list:
    cfg = json.loads((model_dir / "config.json").read_text())
    return [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]


@pytest.mark.parametrize("verb", ["finetune", "glue"])
@pytest.mark.parametrize("override,needle", [("train.seed=-1", "train.seed: must be in [0, 2**32)"),
                                             ("optim.warmup_ratio=1.5", "optim.warmup_ratio: must be in [0, 1)")])
def test_a_bad_set_value_is_one_line_before_the_workdir_is_made(src, tmp_path, capsys, verb, override, needle):
    from jaxbert.cli.main import main
    from tests.helpers.finetune_data import write_glue_dir
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(16, seed=7))
    wd = tmp_path / "wd"
    argv = (["finetune", "--task", "classification", "--train", str(train), "--eval", str(train)] if verb == "finetune"
            else ["glue", "--data", str(write_glue_dir(tmp_path / "glue"))]) + \
        ["--model", str(src), "--workdir", str(wd), "--set", override]
    if verb == "glue":
        argv.insert(1, argv.pop(argv.index("--model") + 1))  # glue takes MODEL as its first argument
        argv.remove("--model")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err
    assert not wd.exists()


def test_optim_warmup_steps_is_the_warmup_a_run_takes(src, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(64, seed=8))
    recipe = load("finetune-tiny", ["train.steps=8", "train.log_every=1", "optim.warmup_steps=4",
                                    "optim.learning_rate=1e-3"])
    assert recipe.optim_for(8).warmup_steps == 4  # not warmup_ratio x 8
    loop_lib.finetune(recipe, parse_task("classification", train, [train]), src, tmp_path / "wd", log=QUIET)
    rows = [json.loads(x) for x in (tmp_path / "wd" / "metrics.jsonl").read_text().splitlines()]
    lr = {r["step"]: r["learning_rate"] for r in rows if "learning_rate" in r}
    # the learning rate of update k (schedule at count k-1): a linear warmup over 4 updates, then the decay
    assert lr[1] == pytest.approx(0.0) and lr[3] == pytest.approx(5e-4, rel=1e-5)
    assert lr[5] == pytest.approx(1e-3, rel=1e-5)


def test_a_workdir_resumes_only_from_the_model_it_was_fine_tuned_from(src, tmp_path):
    """Another model into a finished workdir: refused in one line naming both models (it once resumed
    and reported the first model's score); the same path after its files changed: refused too."""
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(32, seed=4))
    spec = parse_task("classification", train, [train])
    recipe = load("finetune-tiny", ["train.steps=2"])
    mine = tmp_path / "mine"
    shutil.copytree(src, mine)
    assert loop_lib.finetune(recipe, spec, mine, tmp_path / "wd", log=QUIET)["status"] == "finished"
    (tmp_path / "other").mkdir()
    other = make_source(tmp_path / "other", dropout=0.0)  # the same shapes, another config
    with pytest.raises(InputError) as e:
        loop_lib.finetune(recipe, spec, other, tmp_path / "wd", log=QUIET)
    message = str(e.value)
    assert "\n" not in message and f"a fine-tune of {mine}, not of {other}" in message
    for name in ("config.json", "model.safetensors"):
        shutil.copy(other / name, mine / name)
    with pytest.raises(InputError, match=r"fine-tuned from .*mine as it was then .*its files have changed"):
        loop_lib.finetune(recipe, spec, mine, tmp_path / "wd", log=QUIET)
