"""Where the train step's compile time goes: lowering vs XLA compile, by depth and layout.

    python benchmarks/compile_bench.py [--preset bert-base-uncased] [--layers 1 12 24]

For each depth, the bert-base (or --preset) MLM train step at 8x128 is lowered and
compiled from abstract shapes with scanned and with per-layer (unscanned) params,
after jax.clear_caches(). The 1-layer unscanned figure is the part that does not
grow with depth (embeddings, MLM head, loss, AdamW, metrics); the slope of the
unscanned figures is the cost of one more layer.
"""

from __future__ import annotations

import argparse

import jax

from jaxbert.bench import contenders
from jaxbert.model.configs import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bert-base-uncased")
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 12, 24])
    args = parser.parse_args()
    base = contenders.no_dropout(preset(args.preset))
    print(f"{'layers':>6s} {'layout':>10s} {'lower s':>8s} {'compile s':>9s} {'total s':>8s}")
    for n in args.layers:
        for scan in (True, False):
            jax.clear_caches()
            lower, comp = contenders.jax_compile_split(base.replace(num_hidden_layers=n), 8, 128, scan_layers=scan)
            print(f"{n:6d} {'scan' if scan else 'unscanned':>10s} {lower:8.2f} {comp:9.2f} {lower + comp:8.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
