"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run."""

from __future__ import annotations

from jaxbert.train.export import export_workdir, load_instructions


def add_arguments(parser) -> None:
    parser.add_argument("workdir", help="a training workdir (holds checkpoints/)")
    parser.add_argument("dst", help="output directory for the Hugging Face model")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest readable)")


def run(args) -> int:
    try:
        path = export_workdir(args.workdir, args.dst, args.step)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"jaxbert export: {e}")
        return 2
    print(f"wrote {path}")
    print(load_instructions(path))
    return 0
