"""Peak memory and step time of a tiny ModernBERT's forward + backward at long T, per attention_impl.

    python benchmarks/long_attention.py [--lengths 1024 2048 4096 8192] [--impls einsum auto] [--skip einsum:8192]

The model: hidden 64, 6 layers (global every third, the rest +-64 tokens), 4 heads, intermediate 96,
vocabulary 512, float32, batch 1; the step is jax.value_and_grad of a cross-entropy over every position.
Each (impl, T) point runs in a fresh process, so its peak resident set (ru_maxrss) is its own: the table
shows that peak, the resident set before the first step (params, inputs, jax itself) and the difference
(what the step's compile and run added), and the median of 3 timed steps after one warm-up. On a CPU
`auto` is the blocked path (jaxbert.model.fused). A point whose process dies (out of memory) says so.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

_CHILD = """
import json, resource, sys, time
import jax, jax.numpy as jnp, numpy as np
from jaxbert.model.modernbert import ModernBertConfig, build
from jaxbert.model.options import ModelOptions
impl, T = sys.argv[1], int(sys.argv[2])
cfg = ModernBertConfig(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                       num_attention_heads=4, max_position_embeddings=T, pad_token_id=0, bos_token_id=1,
                       eos_token_id=2, cls_token_id=1, sep_token_id=2)
model = build("ModernBertForMaskedLM", cfg, ModelOptions(attention_impl=impl))
rng = np.random.default_rng(0)
ids = jnp.asarray(rng.integers(3, 512, (1, T)), jnp.int32)
labels = jnp.asarray(rng.integers(3, 512, (1, T)), jnp.int32)
params = jax.jit(model.init)(jax.random.PRNGKey(0), ids)["params"]

def loss(p):
    logits = model.apply({"params": p}, ids).logits
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1).mean()

step = jax.jit(jax.value_and_grad(loss))
jax.block_until_ready(params)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
jax.block_until_ready(step(params))
first = time.perf_counter() - t0
times = []
for _ in range(3):
    t0 = time.perf_counter()
    jax.block_until_ready(step(params))
    times.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"impl": impl, "T": T, "before_mib": before / 1024, "peak_mib": peak / 1024,
                  "first_s": first, "step_s": sorted(times)[1]}))
"""


def point(impl: str, T: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, impl, str(T)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"impl": impl, "T": T, "error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--impls", nargs="+", default=["einsum", "auto"])
    ap.add_argument("--skip", nargs="*", default=[], metavar="IMPL:T", help="points not run (e.g. einsum:8192, "
                    "which needs more memory than the machine has)")
    args = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"CPU: {cpu}; python {platform.python_version()}", flush=True)
    rows = []
    for T in args.lengths:
        for impl in args.impls:
            if f"{impl}:{T}" in args.skip:
                rows.append({"impl": impl, "T": T, "error": "not run (--skip)"})
                continue
            rows.append(point(impl, T))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| T | attention_impl | peak RSS MiB | before the step MiB | added by the step MiB | step s (median of 3) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['T']} | {r['impl']} | {r['error']} | | | |")
        else:
            print(f"| {r['T']} | {r['impl']} | {r['peak_mib']:,.0f} | {r['before_mib']:,.0f} | "
                  f"{r['peak_mib'] - r['before_mib']:,.0f} | {r['step_s']:.3f} |")


if __name__ == "__main__":
    main()
