"""`jaxbert convert SRC DST --to {jaxbert,hf}`: parses arguments, calls jaxbert.convert.convert."""

from __future__ import annotations

import argparse

from jaxbert.convert import convert


MODEL_ARGUMENTS = {"src": "SRC"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="a Hugging Face or jaxbert directory, or a .safetensors/.bin/.pt/"
                                    ".msgpack file (with config.json beside it or --config)")
    parser.add_argument("dst", help="the directory to write")
    parser.add_argument("--to", required=True, choices=("jaxbert", "hf"), help="output format")
    parser.add_argument("--model-class", default=None,
                        help="jaxbert class name (default: the config's architectures)")
    parser.add_argument("--dtype", default=None, help="cast params: float32, bfloat16, float16 "
                                                      "(default: keep the checkpoint's)")
    parser.add_argument("--config", default=None, help="config.json or preset, for a lone weights file")
    parser.add_argument("--strict", action="store_true", help="refuse missing params and unused tensors")
    parser.add_argument("--scan-layers", action="store_true",
                        help="with --to jaxbert: store the scanned (stacked) layer layout")
    parser.add_argument("--max-shard-size", default="5GB", help="with --to hf: shard above this size")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DST when it is an earlier jaxbert model directory (anything else is refused)")


def run(args: argparse.Namespace) -> int:
    report = convert(args.src, args.dst, args.to, args.model_class, config=args.config,
                     dtype=args.dtype, strict=args.strict, scan_layers=args.scan_layers,
                     max_shard_size=args.max_shard_size, overwrite=args.overwrite)
    print(report.summary())
    print(f"wrote {args.to} directory {args.dst}")
    return 0
