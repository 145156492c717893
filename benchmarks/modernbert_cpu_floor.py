"""How close a ModernBERT train step on this CPU can get to transformers': the step's matmuls alone, beside
both whole steps.

    python benchmarks/modernbert_cpu_floor.py [--batch 8] [--seq 512] [--repeats 5]

The model is `jaxbert bench`'s ModernBERT (6 layers, hidden 384, window 128, V = 50,368, 30% of the tokens
labelled). Every weight matmul of its MLM train step (forward, and the two of its backward: the input's and
the weight's gradient) is timed on its own shape, in jax (XLA) and in torch, and summed: no step can run
faster than its matmuls at the rate each framework reaches on them. Attention's own products (a few percent
of the FLOPs at T = 512) are left out, so the floors are a little low. Both whole steps are then timed as the
bench times them (`python -m jaxbert.bench.worker`, one process per contender, the same weights and tokens).
The last lines say how much faster than torch's step jaxbert could be if everything but its matmuls were
free. Each framework is timed alone, median of --repeats calls after two warm-up calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from matmul_bench import median_seconds  # this folder's: the script runs as benchmarks/...py


def step_matmuls(batch: int, seq: int, layers: int = 6, hidden: int = 384, vocab: int = 50368):
    """(name, m, k, n, count) of every weight matmul's forward [m, k] x [k, n] in one step; each also runs
    twice in the backward pass ([m, n] x [n, k] and [k, m] x [m, n])."""
    from jaxbert.bench.contenders import MODERNBERT_MASK_RATE
    from jaxbert.data.masking import masked_slots
    R, H, I = batch * seq, hidden, hidden * 3 // 2
    M = batch * masked_slots(seq, MODERNBERT_MASK_RATE)
    return [("Wqkv", R, H, 3 * H, layers), ("attn Wo", R, H, H, layers), ("mlp Wi", R, H, 2 * I, layers),
            ("mlp Wo", R, I, H, layers), ("head dense", M, H, H, 1), ("decoder", M, H, vocab, 1)]


def time_matmuls(m: int, k: int, n: int, repeats: int) -> tuple[float, float]:
    """Seconds of forward + both backward products of an [m, k] x [k, n] matmul: (jax, torch)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    rng = np.random.default_rng(0)
    a, b, g = (rng.standard_normal(s, np.float32) for s in ((m, k), (k, n), (m, n)))
    ja, jb, jg = map(jnp.asarray, (a, b, g))
    fwd, dx, dw = jax.jit(lambda a, b: a @ b), jax.jit(lambda g, b: g @ b.T), jax.jit(lambda a, g: a.T @ g)
    jax_s = (median_seconds(lambda: fwd(ja, jb).block_until_ready(), repeats)
             + median_seconds(lambda: dx(jg, jb).block_until_ready(), repeats)
             + median_seconds(lambda: dw(ja, jg).block_until_ready(), repeats))
    ta, tb, tg = map(torch.from_numpy, (a, b, g))
    torch_s = (median_seconds(lambda: ta @ tb, repeats) + median_seconds(lambda: tg @ tb.T, repeats)
               + median_seconds(lambda: ta.T @ tg, repeats))
    return jax_s, torch_s


def whole_step(contender: str, batch: int, seq: int, repeats: int) -> float:
    """Median seconds of the bench's train/modernbert-6x384 step, in a worker process of its own."""
    spec = {"work": f"train/modernbert-6x384/{batch}x{seq}", "contender": contender, "repeats": repeats,
            "options": {"attention": "auto", "malloc": "keep"}}
    out = subprocess.run([sys.executable, "-m", "jaxbert.bench.worker", json.dumps(spec)], check=True,
                         capture_output=True, text=True).stdout
    return statistics.median(json.loads(out.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    floors = [0.0, 0.0]
    print(f"{'matmul (m x k x n) x count':>36s} {'jax ms':>8s} {'torch ms':>8s}   fwd + 2 bwd, each x count")
    for name, m, k, n, count in step_matmuls(args.batch, args.seq):
        jax_s, torch_s = time_matmuls(m, k, n, args.repeats)
        floors[0] += count * jax_s
        floors[1] += count * torch_s
        print(f"{f'{name} {m} x {k} x {n} x {count}':>36s} {count * jax_s * 1e3:8.1f} {count * torch_s * 1e3:8.1f}")
    steps = [whole_step(c, args.batch, args.seq, args.repeats) for c in ("jaxbert", "torch-eager")]
    print(f"{'matmul floor':>36s} {floors[0] * 1e3:8.0f} {floors[1] * 1e3:8.0f}")
    print(f"{'whole train step':>36s} {steps[0] * 1e3:8.0f} {steps[1] * 1e3:8.0f}")
    print(f"{'step / floor':>36s} {steps[0] / floors[0]:8.2f} {steps[1] / floors[1]:8.2f}")
    print(f"jaxbert / transformers (tokens/s): {steps[1] / steps[0]:.2f}x; at most {steps[1] / floors[0]:.2f}x "
          f"if all but jax's matmuls took no time")


if __name__ == "__main__":
    main()
