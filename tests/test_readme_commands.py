"""README's commands exist as written: every `jaxbert ...` command in its code blocks and inline code names
a verb the CLI has and only flags that verb's parser takes; the messages README quotes are the tool's; the
cheap commands run.

The first check reads argparse and runs nothing, so it is instant; what it catches is a README that tells
a user to type a flag that exits 2 (`plan --config`, where the flag is `--recipe`).
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from jaxbert import errors
from jaxbert.cli.main import VERBS, build_parser, main

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands(text: str) -> list[str]:
    """Every `jaxbert VERB ...` command in text's fenced code blocks (continuations joined, `;` and `&&`
    split, comments cut) and inline code spans."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"\s*(?:;|&&)\s*", line.split("  #")[0]):
                out.append(part.strip())
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    out += [" ".join(span.split()) for span in re.findall(r"`(jaxbert [^`]*)`", prose)]
    return [c for c in out if re.match(r"jaxbert [a-z]", c)]


def _parser(words: list[str]) -> tuple[argparse.ArgumentParser, str]:
    """The parser a command's words reach (the verb's, or its sub-verb's: `data prepare`) and its name."""
    verb = words[0]
    sub = next(a for a in build_parser(verb)._actions if a.dest == "verb")
    parser, name = sub.choices[verb], verb
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if nested and len(words) > 1 and words[1] in nested[0].choices:
        parser, name = nested[0].choices[words[1]], f"{verb} {words[1]}"
    return parser, name


def _flags(command: str) -> list[str]:
    """The --flags a command (or a usage line: `[--seeds 1|3|5]`, `(--recipe R | --preset P)`) names; a
    quoted value is the flag's, not the verb's (`--pipeline-options="--project=P --region=R"`)."""
    unquoted = re.sub(r"\"[^\"]*\"|'[^']*'", "", command)
    return re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", unquoted)


def test_readme_finds_the_commands_it_should():
    commands = readme_commands(README.read_text())
    assert len(commands) > 40
    assert "jaxbert finetune --task glue/mrpc --model minilm --data GLUE_DIR" in commands  # a code block
    assert any(c.startswith("jaxbert bench --e2e-rounds 3") for c in commands)  # the benchmark table


def test_every_readme_command_names_a_verb_and_flags_the_cli_has():
    wrong = []
    for command in readme_commands(README.read_text()):
        words = command.split()[1:]
        if words[0] not in VERBS:
            wrong.append(f"{command}: no verb {words[0]!r}")
            continue
        parser, name = _parser(words)
        known = set(parser._option_string_actions)
        wrong += [f"{command}: `jaxbert {name}` has no {flag}" for flag in _flags(command) if flag not in known]
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_a_flag_the_verb_lacks():
    parser, _ = _parser(["plan"])
    assert "--recipe" in parser._option_string_actions and "--config" not in parser._option_string_actions
    assert _flags("jaxbert plan (--recipe R | --preset P --seq-len T) [--target TOPOLOGY]") == [
        "--recipe", "--preset", "--seq-len", "--target"]
    assert _flags('jaxbert data prepare --runner dataflow --pipeline-options="--project=P --region=R"') == [
        "--runner", "--pipeline-options"]


@pytest.mark.parametrize("module,extra,name", [("pyarrow", "data", "pyarrow"), ("torch", "torch", "torch")])
def test_the_missing_extra_messages_are_the_ones_readme_quotes(monkeypatch, module, extra, name):
    real = errors.importlib.import_module
    monkeypatch.setattr(errors.importlib, "import_module",
                        lambda m, *a: (_ for _ in ()).throw(ImportError(m)) if m == module else real(m, *a))
    with pytest.raises(errors.InputError) as e:
        errors.require(module, extra, "reading F")
    message = str(e.value)
    tail = message[message.index(f"needs {name}: "):]
    assert tail in " ".join(README.read_text().split()), tail


@pytest.mark.parametrize("argv,listed", [("jaxbert train --list", "tiny-demo"),
                                         ("jaxbert finetune --list", "finetune-tiny"),
                                         ("jaxbert demo", "-> logits (2, 16, 30522)")])
def test_readmes_cheap_commands_run(argv, listed, capsys):
    assert argv in readme_commands(README.read_text())
    assert main(shlex.split(argv)[1:]) == 0
    assert listed in capsys.readouterr().out


def test_readme_and_the_numerics_log_quote_the_float64_tolerances_the_tool_applies():
    from jaxbert.parity.report import GRAD_TOLERANCE, TOLERANCE
    stages, grads = (re.sub(r"e-0(\d)", r"e-\1", f"{t['float64']:g}") for t in (TOLERANCE, GRAD_TOLERANCE))
    readme = " ".join(README.read_text().split())
    numerics = " ".join((README.parent / "docs" / "numerics.md").read_text().split())
    assert f"tolerances {stages} on hidden states, {grads} relative on gradients" in readme
    assert f"tolerance **{stages}** on every stage and {grads} relative on gradients" in numerics


def test_readmes_recipe_list_is_the_registry():
    """Every recipe `jaxbert train --list` names, in its order (bert-base-phase1-1gpu and -8gpu were missing)."""
    from jaxbert.engine.recipe import recipe_names
    listed = ", ".join(f"`{name}`" for name in recipe_names("train"))
    assert "`bert-base-phase1-1gpu`, `bert-base-phase1-8gpu`" in listed
    text = " ".join(README.read_text().split())
    assert f"names the shipped recipes, each with the hardware it is written for: {listed} (the ModernBERT" in text, (
        f"README's recipe list (## Pretraining) must be every recipe of `jaxbert train --list`, in order: {listed}")


def test_readmes_file_names_are_the_ones_its_commands_make():
    """The fine-tuning block evaluates on dev.jsonl, the file its first line writes (not dev.json)."""
    commands = readme_commands(README.read_text())
    evaluate = [c for c in commands if c.startswith("jaxbert evaluate") and "--eval FILE" not in c]  # not usage
    assert evaluate and all(c.split("--eval ")[1].split()[0] == "dev.jsonl" for c in evaluate), evaluate
