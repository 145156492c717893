"""`jaxbert plot WORKDIR [--out PNG]`: loss and MLM accuracy curves of a training run."""

from __future__ import annotations

from jaxbert.train.plot import plot_workdir


def add_arguments(parser) -> None:
    parser.add_argument("workdir", help="a training workdir (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="PNG path (default: WORKDIR/curves.png)")


def run(args) -> int:
    path = plot_workdir(args.workdir, args.out)
    print(path)
    return 0
