"""`jaxbert <verb>`: parses arguments and hands them to one library function.

Each verb lives in its own module, imported only when the verb runs, with
``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

VERBS = {
    "demo": ("jaxbert.demo", "run a tiny BertForMaskedLM on a sentence and print its shapes"),
    "convert": ("jaxbert.convert.cli", "convert a checkpoint: Hugging Face/PyTorch <-> jaxbert"),
    "parity": ("jaxbert.parity.cli", "compare jaxbert with transformers layer by layer"),
    "data": ("jaxbert.train.data_cli", "prepare a pretraining corpus (data prepare ...)"),
    "tokenizer": ("jaxbert.train.tokenizer_cli", "train a WordPiece tokenizer (tokenizer train ...)"),
    "train": ("jaxbert.train.cli", "MLM pretraining from a recipe in configs/train/"),
    "export": ("jaxbert.train.export_cli", "write a Hugging Face directory from a training workdir"),
    "plot": ("jaxbert.train.plot", "plot loss and accuracy curves of a workdir to PNG"),
    "fill-mask": ("jaxbert.fill_mask", "top-k predictions for [MASK] tokens"),
    "generate": ("jaxbert.generate", "generate text with a BertLMHeadModel"),
    "bench": ("jaxbert.bench.cli", "benchmarks side by side with transformers"),
}


def _available() -> dict:
    return {verb: spec for verb, spec in VERBS.items() if importlib.util.find_spec(spec[0]) is not None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxbert", description="BERT in JAX/Flax.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, (module_name, help_text) in _available().items():
        p = sub.add_parser(verb, help=help_text, description=help_text)
        p.set_defaults(_module=module_name)
        importlib.import_module(module_name).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["train"] if "train" in _available() else ["demo"]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
