"""Every verb reports a user's mistake as one stderr line naming it, with exit code 2, and no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jaxbert.cli.main import VERBS, build_parser, main
from tests.helpers.cli import one_line


def _cases(tmp):
    (tmp / "empty").mkdir()
    (tmp / "bad.yaml").write_text("model:\n  presett: bert-tiny\n")
    return {
        "convert": (["convert", str(tmp / "nope"), str(tmp / "out"), "--to", "hf"], "nope"),
        "fill-mask": (["fill-mask", str(tmp / "empty"), "a [MASK] b"], "empty"),
        "export": (["export", str(tmp / "empty"), str(tmp / "out")], "checkpoints"),
        "plot": (["plot", str(tmp / "empty")], "metrics.jsonl"),
        "train": (["train", "--config", str(tmp / "bad.yaml"), "--workdir", str(tmp / "run")], "presett"),
        "generate": (["generate", str(tmp / "empty"), "hello"], "tokenizer.json"),
        "parity": (["parity", str(tmp / "missing-model")], "missing-model"),
        "data": (["data", "inspect", str(tmp / "no-data")], "no-data"),
        "tokenizer": (["tokenizer", "train", "--input", str(tmp / "no-corpus.txt"), "--vocab-size", "50",
                       "--output", str(tmp / "tok")], "no-corpus.txt"),
        "glue": (["glue", str(tmp / "empty"), "--data", str(tmp / "no-glue"), "--workdir", str(tmp / "run")],
                 "no-glue"),
        "finetune-demo": (["finetune-demo", "--tiny-demo", str(tmp / "no-tiny-demo")], "jaxbert train"),
    }


def _check(verb, code, out, err, needle):
    lines = err.strip().splitlines()
    assert code == 2, (verb, out, err)
    assert "Traceback" not in err + out, verb
    assert len(lines) == 1 and lines[0].startswith(f"jaxbert {verb}: error: "), (verb, err)
    assert needle in lines[0], (verb, lines[0])


def test_bad_input_is_one_stderr_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for verb, (argv, needle) in _cases(tmp_path).items():
        code = main(argv)
        captured = capsys.readouterr()
        _check(verb, code, captured.out, captured.err, needle)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_the_process_exits_2_without_a_traceback(tmp_path):
    cases = {v: c for v, c in _cases(tmp_path).items() if v in ("convert", "fill-mask", "train")}
    procs = {verb: subprocess.Popen([sys.executable, "-m", "jaxbert.cli.main", *argv], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for verb, (argv, _) in cases.items()}
    for verb, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        _check(verb, proc.returncode, out, err, cases[verb][1])


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_help_lists_the_exit_codes(verb):
    sub = next(a for a in build_parser()._actions if a.dest == "verb")
    text = sub.choices[verb].format_help()
    assert "exit codes: 0 success, 1 a check failed, 2 bad input" in " ".join(text.split())
    assert "3 the run diverged" in " ".join(text.split())


@pytest.mark.parametrize("argv,hint", [
    (["--steps", "100"], "--set train.steps=100"),
    (["--learning-rate=3e-4", "--seed", "3"], "--set optim.learning_rate=3e-4 or --set train.seed=3"),
    (["--nonsense"], "recipe keys are set with --set KEY=VALUE, e.g. --set train.steps=100"),
])
def test_an_option_train_does_not_take_gets_trains_usage_and_a_hint_toward_set(tmp_path, capsys, argv, hint):
    """`jaxbert train --steps 100` answered with the top level's usage (`usage: jaxbert [-h] VERB ...`) and
    no word of --set: the verb's own parser reports it, with the recipe key the option names."""
    with pytest.raises(SystemExit) as exit_:
        main(["train", *argv, "--workdir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: jaxbert train "), err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"jaxbert train: error: unrecognized arguments: {' '.join(argv)}; ") and hint in last, err
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):  # another verb: its own usage too
        main(["plot", str(tmp_path), "--steps", "3"])
    assert capsys.readouterr().err.startswith("usage: jaxbert plot ")




@pytest.mark.parametrize("override,needle", [
    ("optim.learning_rate=[", "optim.learning_rate"), ("train.seed=-1", "train.seed"),
    ("train.seed=9223372036854775808", "train.seed"), ("train.steps=9223372036854775808", "train.steps"),
    ("data.max_predictions=-3", "data.max_predictions"), ("train.eval_batches=-1", "train.eval_batches"),
    ("parallel.coordinator_address=bogus", "parallel.coordinator_address"),
    ("optim.clip_norm=-1", "optim.clip_norm"), ("optim.b2=1", "optim.b2"), ("optim.eps=0", "optim.eps"),
    ("data.seq_len=128", "data.seq_len"),  # tiny-demo's model has 64 positions
])
def test_train_set_refuses_bad_values_before_any_work(tmp_path, capsys, monkeypatch, override, needle):
    from jaxbert.train import sources

    def no_data(*a, **k):
        raise AssertionError("data prepared for a refused recipe")

    monkeypatch.setattr(sources, "ensure_data", no_data)
    assert main(["train", "--set", override, "--workdir", str(tmp_path / "run")]) == 2
    line = one_line(capsys.readouterr(), "train", needle)
    if needle == "data.seq_len":
        assert "model.config.max_position_embeddings" in line
    assert not (tmp_path / "run").exists()


def test_train_config_that_names_no_recipe_lists_the_shipped_ones(tmp_path, capsys):
    from jaxbert.train.recipe import recipe_names
    assert main(["train", "--config", "nope", "--workdir", str(tmp_path / "run")]) == 2
    one_line(capsys.readouterr(), "train", "nope", *recipe_names())


def test_data_without_validation_rows_is_refused_before_training(tmp_path, capsys):
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    from tests.helpers.runs import write_recipe
    text = tmp_path / "c.txt"
    text.write_text("\n\n".join(f"the cat number {i} sat on the mat and looked at the dog {i % 7}." * 3
                                for i in range(60)))
    train_tokenizer([str(text)], 120, tmp_path / "tok")
    prepare([str(text)], str(tmp_path / "tok"), str(tmp_path / "data"), max_length=16, validation_fraction=0,
            progress=False)
    from tests.helpers.runs import TINY
    config = {k: v for k, v in TINY["model"]["config"].items() if k != "vocab_size"}  # the tokenizer's
    recipe = write_recipe(tmp_path / "r.yaml", model={"config": config},
                          data={"source": "prepared", "dir": str(tmp_path / "data"), "tokenizer": str(tmp_path / "tok")})
    wd = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(wd)]) == 2
    one_line(capsys.readouterr(), "train", str(tmp_path / "data"), "split 'validation'", "held-out rows")
    assert not (wd / "metrics.jsonl").exists() and not (wd / "checkpoints").exists()


def test_a_path_that_does_not_exist_is_named_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["fill-mask", "runs/tiny-demo", "a [MASK] b"]) == 2
    one_line(capsys.readouterr(), "fill-mask", "runs/tiny-demo: does not exist")
    assert main(["export", str(tmp_path / "gone"), str(tmp_path / "out")]) == 2
    one_line(capsys.readouterr(), "export", f"{tmp_path / 'gone'}: does not exist")
    assert not (tmp_path / "out").exists()


def test_export_of_a_step_that_was_not_kept_lists_the_kept_ones(tmp_path, capsys):
    from tests.helpers.runs import write_recipe
    recipe = write_recipe(tmp_path / "r.yaml", train={"steps": 4, "eval_every": 0}, checkpoint={"every_steps": 2})
    wd = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(wd)]) == 0
    capsys.readouterr()
    assert main(["export", str(wd), str(tmp_path / "out"), "--step", "3"]) == 2
    captured = capsys.readouterr()
    line = one_line(captured, "export", "no checkpoint of step 3", "the steps kept: 2, 4")
    assert "trying the one before" not in captured.out + captured.err, line


def test_bench_only_names_the_works(capsys, monkeypatch):
    from jaxbert.bench import harness

    def no_worker(*a, **k):
        raise AssertionError("a worker started for a refused --only")

    monkeypatch.setattr(harness, "run_worker", no_worker)
    assert main(["bench", "--only", "nope"]) == 2
    one_line(capsys.readouterr(), "bench", "--only nope", "train/bert-base/8x128", "convert/bert-base")


def test_help_imports_no_verb_and_no_framework():
    script = ("import sys\nfrom jaxbert.cli import main\ntry:\n    main.main(['--help'])\nexcept SystemExit:\n    pass\n"
              "heavy = [m for m in ('jax', 'flax', 'torch', 'transformers') if m in sys.modules]\n"
              "verbs = [m for m in sys.modules if m.startswith('jaxbert.cli.') and m != 'jaxbert.cli.main']\n"
              "print('LOADED', heavy, verbs)")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "LOADED [] []" in r.stdout, r.stdout
    assert "train" in r.stdout and "plan" in r.stdout  # the verb list is there all the same


def test_a_verb_imports_its_own_module_only():
    script = ("import sys\nfrom jaxbert.cli import main\ntry:\n    main.main(['plot', '--help'])\nexcept SystemExit:\n"
              "    pass\nprint('LOADED', sorted(m for m in sys.modules if m.startswith('jaxbert.cli.')))")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "LOADED ['jaxbert.cli.main', 'jaxbert.cli.plot']" in r.stdout, r.stdout + r.stderr


def test_install_hints_say_how_from_a_clone_and_pin_torch():
    from pathlib import Path
    import jaxbert
    from jaxbert.errors import InputError, require
    with pytest.raises(InputError, match=r"pip install torch==2\.13\.0 '\.\[torch\]'"):
        require("no_such_module_jaxbert_test", "torch", "a test")
    with pytest.raises(InputError, match=r"pip install '\.\[plot\]'"):
        require("no_such_module_jaxbert_test", "plot", "a test")
    package = Path(jaxbert.__file__).parent
    offenders = [str(p) for p in package.rglob("*.py") if "jaxbert[" in p.read_text()]
    assert offenders == []  # jaxbert is not on PyPI: no `pip install 'jaxbert[...]'`


@pytest.mark.parametrize("argv,flag", [(["predict", "MODEL", "FILE", "--out"], "--out"),
                                       (["glue", "MODEL", "--data", "GLUE", "--json"], "--json"),
                                       (["finetune-demo", "--json"], "--json")])
def test_a_report_file_that_exists_is_refused_before_any_work(tmp_path, capsys, argv, flag):
    mine = tmp_path / "mine.json"
    mine.write_text("a user's file")
    assert main([*argv, str(mine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} {mine}: exists" in err[0], err
    assert mine.read_text() == "a user's file"


def test_generate_on_a_masked_lm_says_what_the_model_is_and_what_generates(tmp_path, capsys):
    from tests.helpers.hf_models import TINY, tiny_hf_model
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(TINY["vocab_size"] - 5)]
    for name, folder in (("BertForMaskedLM", tmp_path / "mlm"), ("BertLMHeadModel", tmp_path / "decoder")):
        tiny_hf_model(name).save_pretrained(folder)
        (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    code = main(["generate", str(tmp_path / "mlm"), "w1 w2", "--max-new-tokens", "2"])
    captured = capsys.readouterr()
    _check("generate", code, captured.out, captured.err, "a masked-LM model (BertForMaskedLM")
    assert "jaxbert fill-mask" in captured.err and "is_decoder: true" in captured.err
    assert "needs is_decoder=true" not in captured.err
    # a decoder still generates: two new tokens after the prompt
    assert main(["generate", str(tmp_path / "decoder"), "w1 w2", "--max-new-tokens", "2"]) == 0
    words = capsys.readouterr().out.splitlines()[0].split()
    assert words[:2] == ["w1", "w2"] and len(words) == 4
