"""The matmuls of a bert-base 8x128 step, jax (XLA CPU) beside torch, fp32 and bf16.

    python benchmarks/matmul_bench.py [--repeats 8]

Prints GFLOP/s per shape (median of --repeats calls after two warm-up calls),
each framework timed alone. On CPU this bounds what any jaxbert train step can
reach: its time is at least its FLOPs over XLA's matmul rate.
"""

from __future__ import annotations

import argparse
import statistics
import time

# (rows, inner, cols): a 2048^2 square, then bert-base at B*T = 1024 tokens:
# FFN in, FFN out, a Q/K/V/O projection, the MLM head at 160 gathered positions.
SHAPES = [(2048, 2048, 2048), (1024, 768, 3072), (1024, 3072, 768), (1024, 768, 768), (160, 768, 30522)]


def median_seconds(fn, repeats: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp
    import torch

    print(f"{'m x k x n':>20s} {'jax fp32':>9s} {'torch fp32':>10s} {'jax bf16':>9s} {'torch bf16':>10s}  GFLOP/s")
    for m, k, n in SHAPES:
        gflop = 2 * m * k * n / 1e9
        row = []
        for jdt, tdt in ((jnp.float32, torch.float32), (jnp.bfloat16, torch.bfloat16)):
            a, b = jnp.ones((m, k), jdt), jnp.ones((k, n), jdt)
            dot = jax.jit(jnp.dot)
            row.append(gflop / median_seconds(lambda: dot(a, b).block_until_ready(), args.repeats))
            ta, tb = torch.ones(m, k, dtype=tdt), torch.ones(k, n, dtype=tdt)
            row.append(gflop / median_seconds(lambda: torch.mm(ta, tb), args.repeats))
        print(f"{f'{m} x {k} x {n}':>20s} {row[0]:9.0f} {row[1]:10.0f} {row[2]:9.0f} {row[3]:10.0f}")


if __name__ == "__main__":
    main()
