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
import time

import jax
import jax.numpy as jnp

from jaxbert.bench import works
from jaxbert.config import preset
from jaxbert.train.step import train_step


def compile_split(cfg, scan: bool, batch: int = 8, seq_len: int = 128) -> tuple[float, float]:
    model, tx, schedule, TrainState = works._train_state(cfg, dict(scan_layers=scan))
    data = {k: jax.ShapeDtypeStruct((1,) + v.shape, v.dtype) for k, v in works._batch(cfg, batch, seq_len).items()}
    ids = jnp.zeros((batch, seq_len), jnp.int32)
    jax.clear_caches()
    t0 = time.perf_counter()
    state = jax.eval_shape(lambda: TrainState.create(
        model.apply, model.init(jax.random.key(0), ids)["params"], tx, schedule))
    lowered = jax.jit(train_step, donate_argnums=0).lower(state, data, jax.random.key(0))
    t1 = time.perf_counter()
    lowered.compile()
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bert-base-uncased")
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 12, 24])
    args = parser.parse_args()
    base = works.no_dropout(preset(args.preset))
    print(f"{'layers':>6s} {'layout':>10s} {'lower s':>8s} {'compile s':>9s} {'total s':>8s}")
    for n in args.layers:
        for scan in (True, False):
            lower, comp = compile_split(base.replace(num_hidden_layers=n), scan)
            print(f"{n:6d} {'scan' if scan else 'unscanned':>10s} {lower:8.2f} {comp:9.2f} {lower + comp:8.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
