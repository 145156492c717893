"""Every verb reports a user's mistake as one stderr line naming it, with exit code 2, and no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jaxbert.cli.main import VERBS, build_parser, main


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
