"""`jaxbert <verb>`: parses arguments and hands them to one library function.

Each verb lives in its own module, imported only when the verb is named (``jaxbert --help``
imports none), with ``add_arguments(parser)`` and ``run(args) -> int``; a verb's module imports
what its options need at the top and the rest in ``run``. A verb that takes a model lists that
argument in ``MODEL_ARGUMENTS`` ({dest: the name its errors use}): its short names (``minilm``)
are resolved here, the same way for every verb (jaxbert.packaged).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import warnings

from jaxbert.errors import EXIT_BAD_INPUT, EXIT_CODES_HELP, JaxbertError
from jaxbert.model.families import FAMILIES  # the registry alone: data, no model code
from jaxbert.packaged import resolve_model

VERBS = {
    "demo": ("jaxbert.cli.demo", "run a tiny BertForMaskedLM on a sentence and print its shapes"),
    "convert": ("jaxbert.cli.convert", "convert a checkpoint: Hugging Face/PyTorch <-> jaxbert"),
    "parity": ("jaxbert.cli.parity", "compare jaxbert with transformers layer by layer"),
    "data": ("jaxbert.cli.data", "prepare a pretraining corpus (data prepare ...)"),
    "tokenizer": ("jaxbert.cli.tokenizer", "train a WordPiece or byte-level BPE tokenizer (tokenizer train ...)"),
    "train": ("jaxbert.cli.train", "MLM pretraining from a recipe (default: the tiny-demo)"),
    "finetune": ("jaxbert.cli.finetune", "fine-tune on a task (classification, regression, tokens, qa, choice, glue/NAME)"),
    "glue": ("jaxbert.cli.glue", "the eight GLUE tasks under one protocol: a table of dev scores and their average"),
    "finetune-demo": ("jaxbert.cli.finetune_demo", "what pretraining buys: three models on docstring kinds (--task embedding: a retriever); no download"),
    "predict": ("jaxbert.cli.predict", "predictions of a fine-tuned model as JSONL"),
    "evaluate": ("jaxbert.cli.evaluate", "score a fine-tuned model on labelled data"),
    "export": ("jaxbert.cli.export", "write a Hugging Face directory from a training workdir"),
    "plot": ("jaxbert.cli.plot", "plot loss and accuracy curves of a workdir to PNG"),
    "fill-mask": ("jaxbert.cli.fill_mask", "top-k predictions for [MASK] tokens"),
    "generate": ("jaxbert.cli.generate", "generate text with a causal-LM class ("
                 + ", ".join(c for f in FAMILIES.values() for t in f.model_types if (c := f.decoder_class(t)))
                 + "); a family without one is refused by name"),
    "bench": ("jaxbert.cli.bench", "benchmarks side by side with transformers"),
    "plan": ("jaxbert.cli.plan", "largest batch that fits per remat policy, compiled for a target"),
}


def _available() -> dict:
    return {verb: spec for verb, spec in VERBS.items() if importlib.util.find_spec(spec[0]) is not None}


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser: every verb listed, only `verb`'s module imported for its arguments (None: none is)."""
    parser = argparse.ArgumentParser(
        prog="jaxbert", description="BERT in JAX/Flax.",
        epilog="quick start: `jaxbert train` trains the tiny-demo recipe (a small BERT, minutes on a CPU) "
               "on the embedded corpus into ./runs/tiny-demo.\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    parser.verb_parsers = {}  # verb -> its parser, which reports an option it does not know (main)
    for name, (module_name, help_text) in _available().items():
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES_HELP)
        p.set_defaults(_module=module_name)
        parser.verb_parsers[name] = p
        if name == verb:
            importlib.import_module(module_name).add_arguments(p)
    return parser


def _unknown(parser: argparse.ArgumentParser, verb: str, extras: list[str]) -> None:
    """An argument the verb does not take: reported by the verb's own parser (its usage, not the
    top level's), with the verb module's ``unknown_hint(extras)`` when it has one (exit 2)."""
    hint = getattr(importlib.import_module(VERBS[verb][0]), "unknown_hint", lambda extras: None)(extras)
    parser.verb_parsers[verb].error(f"unrecognized arguments: {' '.join(extras)}" + (f"; {hint}" if hint else ""))


def _fail(verb: str, message: object, code: int) -> int:
    text = " ".join(str(message).split()) or type(message).__name__
    print(f"jaxbert {verb}: error: {text}", file=sys.stderr)
    return code


@contextlib.contextmanager
def _deprecations_shown(verb: str):
    """jaxbert's own DeprecationWarnings (a recipe key's old name), which Python shows only in __main__,
    as one line each on stderr while the verb runs."""
    shown, own = warnings.showwarning, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DeprecationWarning) and os.path.abspath(filename).startswith(own + os.sep):
            print(f"jaxbert {verb}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.filterwarnings("default", category=DeprecationWarning, module=r"jaxbert(\.|$)")
        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verb = next((a for a in argv if not a.startswith("-")), None)  # the top level has options -h only
    parser = build_parser(verb if verb in VERBS else None)
    if not argv:  # bare `jaxbert`: the verbs and the quick start, nothing started
        parser.print_help()
        return 0
    args, extras = parser.parse_known_args(argv)
    if extras and args.verb is None:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    if args.verb is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    if extras:
        _unknown(parser, args.verb, extras)
    try:
        module = importlib.import_module(args._module)
        for dest, flag in getattr(module, "MODEL_ARGUMENTS", {}).items():
            setattr(args, dest, resolve_model(getattr(args, dest), flag))
        with _deprecations_shown(args.verb):
            return int(module.run(args) or 0)
    except JaxbertError as e:
        return _fail(args.verb, e, e.exit_code)
    except OSError as e:  # a missing or unreadable input, a read-only or full destination
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        return _fail(args.verb, f"{where}{e.strerror or e}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return _fail(args.verb, "interrupted", 130)


if __name__ == "__main__":
    sys.exit(main())
