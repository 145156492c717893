"""CPU time, system time and page faults per tiny-demo train step, with and without jaxbert's malloc settings.

    python benchmarks/alloc_bench.py [--steps 40]

Both variants run at the same time, each in its own process (the allocator is per process), on the
tiny-demo model and batch shapes with synthetic batches; the table prints them side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = """
import json, resource, sys, time
if sys.argv[1] == "jaxbert":
    from jaxbert.train.allocator import keep_freed_memory
    keep_freed_memory()
import jax, jax.numpy as jnp
from jaxbert.engine import parallel
from jaxbert.train import sources
from jaxbert.model.classes import build_model
from jaxbert.engine.optim import make_optimizer
from jaxbert.train.recipe import load
from jaxbert.train.mlm import train_step
steps = int(sys.argv[2])
r = load("tiny-demo", ["data.source=synthetic"])
model = build_model(r.model.model_class, r.model_config(r.data.vocab_size), r.model.options())
runner = parallel.make_runner(r.parallel)
tx, schedule = make_optimizer(r.optim, r.train.steps)
dummy = jnp.zeros((1, r.data.seq_len), jnp.int32)
runner.prepare(model, lambda: model.init_boxed(jax.random.PRNGKey(0), dummy, dummy)["params"], tx, schedule)
state, train_fn, rng = runner.create_state(), runner.compile_train(train_step), jax.random.PRNGKey(1)
src = sources.make_source(r, None, r.train.per_device_batch_size, vocab_size=r.data.vocab_size)
batches = [runner.shard_batch({k: v[None] for k, v in next(src).items()}) for _ in range(8)]
for b in batches[:3]:  # compile and warm up
    state, m = train_fn(state, b, rng)
jax.device_get(m)
u0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
for i in range(steps):
    state, m = train_fn(state, batches[i % len(batches)], rng)
    jax.device_get(m)
u1, wall = resource.getrusage(resource.RUSAGE_SELF), time.time() - t0
print(json.dumps({"user_ms": (u1.ru_utime - u0.ru_utime) / steps * 1e3, "sys_ms": (u1.ru_stime - u0.ru_stime) / steps * 1e3,
                  "fault_mb": (u1.ru_minflt - u0.ru_minflt) / steps * 4096 / 2**20, "wall_ms": wall / steps * 1e3}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    procs = {name: subprocess.Popen([sys.executable, "-c", _CHILD, name, str(args.steps)], stdout=subprocess.PIPE,
                                    text=True) for name in ("glibc-default", "jaxbert")}
    rows = {name: json.loads(p.communicate()[0].strip().splitlines()[-1]) for name, p in procs.items()}
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"tiny-demo train step, {args.steps} steps per variant, both at once; load average {load}")
    print(f"{'malloc':14s} {'user ms':>8s} {'sys ms':>8s} {'CPU ms':>8s} {'faults MB':>10s} {'wall ms':>8s}")
    for name, r in rows.items():
        print(f"{name:14s} {r['user_ms']:8.1f} {r['sys_ms']:8.1f} {r['user_ms'] + r['sys_ms']:8.1f} "
              f"{r['fault_mb']:10.1f} {r['wall_ms']:8.0f}")


if __name__ == "__main__":
    main()
