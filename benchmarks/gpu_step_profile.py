"""Where jaxbert's MLM train step spends its device time, and what some variants of it take.

    python benchmarks/gpu_step_profile.py --model bert-base --batch 256 --seq 128 [--out DIR]

Builds the step exactly as `jaxbert bench`'s train row does (jaxbert.bench.contenders.jax_train:
bf16 compute, fp32 params, AdamW), times each variant (median of --steps calls after warm-up, one
process, one after another), then traces a few steps of the first variant with jax.profiler and prints
the device kernels that took the most time per step (name, ms per step, share). Written for a GPU; on
a CPU it runs the same code (the kernels are then XLA's CPU thunks). Not a test: figures only.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from jaxbert.bench import contenders  # noqa: E402
from jaxbert.bench.worker import _config  # noqa: E402

VARIANTS = {
    "dot_product": dict(attention_impl="dot_product", dtype=jnp.bfloat16),
    "einsum": dict(attention_impl="einsum", dtype=jnp.bfloat16),
    "dot_product+scan": dict(attention_impl="dot_product", dtype=jnp.bfloat16, scan_layers=True),
    "cudnn": dict(attention_impl="dot_product", dtype=jnp.bfloat16),  # implementation="cudnn" forced
}


def force_cudnn():
    """jax.nn.dot_product_attention with implementation="cudnn" (None picks XLA's own on some versions)."""
    original = jax.nn.dot_product_attention

    def cudnn(*a, **k):
        return original(*a, **{**k, "implementation": "cudnn"})
    jax.nn.dot_product_attention = cudnn


def time_step(run, steps: int) -> float:
    for _ in range(3):
        run()
    secs = []
    for _ in range(steps):
        t0 = time.perf_counter()
        run()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)


def kernel_table(trace_dir: str, steps: int, top: int) -> list[tuple[str, float, float]]:
    """[(kernel name, ms per step, share of device time)] from the newest xplane under trace_dir."""
    path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))[-1]
    data = jax.profiler.ProfileData.from_file(path)
    totals = collections.Counter()
    planes = [p for p in data.planes if p.name.startswith("/device:GPU")] or list(data.planes)
    for plane in planes:
        for line in plane.lines:
            if plane.name.startswith("/device:GPU") and "stream" not in line.name.lower():
                continue  # GPU planes: kernels live on the stream lines
            for ev in line.events:
                totals[ev.name] += ev.duration_ns
    if not totals:  # a profiler version that names its lines otherwise: take every line
        for plane in planes:
            for line in plane.lines:
                for ev in line.events:
                    totals[ev.name] += ev.duration_ns
    whole = sum(totals.values()) or 1
    return [(name, ns / steps / 1e6, ns / whole) for name, ns in totals.most_common(top)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", default=None, help="folder for the trace (default: a temporary one)")
    args = ap.parse_args(argv)
    cfg = _config(args.model)
    tokens = args.batch * args.seq
    print(f"device: {jax.devices()[0].device_kind}; {args.model} {args.batch}x{args.seq}", flush=True)
    first = None
    for name in args.variants:
        if name == "cudnn":
            try:
                force_cudnn()
            except Exception as e:  # noqa: BLE001 - a figure script: say it and go on
                print(f"cudnn: {e}")
                continue
        try:
            run = contenders.jax_train(cfg, args.batch, args.seq, **VARIANTS[name])
        except Exception as e:  # noqa: BLE001
            print(f"{name}: failed ({str(e).splitlines()[0][:200]})", flush=True)
            continue
        sec = time_step(run, args.steps)
        print(f"{name:20s} {sec * 1e3:8.2f} ms/step {tokens / sec:12,.0f} tokens/s", flush=True)
        if first is None:
            first = run
        else:
            del run
    trace_dir = args.out or tempfile.mkdtemp(prefix="jaxbert-trace-")
    n = 5
    with jax.profiler.trace(trace_dir):
        for _ in range(n):
            first()
    print(f"\ntop device kernels, {args.variants[0]}, per step (trace in {trace_dir}):")
    for name, ms, share in kernel_table(trace_dir, n, args.top):
        print(f"{ms:8.3f} ms {share:6.1%}  {name[:150]}")


if __name__ == "__main__":
    main()
