"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run."""

from __future__ import annotations

from jaxbert.convert.export import export_workdir, load_instructions


def add_arguments(parser) -> None:
    parser.add_argument("workdir", help="a training workdir (holds checkpoints/)")
    parser.add_argument("dst", help="output directory for the Hugging Face model")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest readable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DST when it is an earlier jaxbert model directory (anything else is refused)")


def run(args) -> int:
    path = export_workdir(args.workdir, args.dst, args.step, overwrite=args.overwrite)
    print(f"wrote {path}")
    print(load_instructions(path))
    return 0
