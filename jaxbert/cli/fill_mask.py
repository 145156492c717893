"""`jaxbert fill-mask MODEL "text with [MASK]"`: the top-k tokens for each [MASK]."""

from __future__ import annotations

from jaxbert.infer.fill_mask import fill_mask, format_predictions, load_for_fill_mask


MODEL_ARGUMENTS = {"model": "MODEL"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser) -> None:
    parser.add_argument("model", help="a Hugging Face / jaxbert directory with a tokenizer, or a training workdir")
    parser.add_argument("text", nargs="+", help="text with one or more [MASK] tokens")
    parser.add_argument("--top-k", type=int, default=5)


def run(args) -> int:
    module, params, tok = load_for_fill_mask(args.model)
    for text in args.text:
        print(format_predictions(text, fill_mask(module, params, tok, text, args.top_k)))
    return 0
