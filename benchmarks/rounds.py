"""Alternating rounds for a benchmark script's own contenders, as `jaxbert bench` times its rows.

A script defines BUILDERS {contender: build(args) -> (fn, extra)} (fn runs one step and blocks; extra()
-> dict after the last round) and calls ``main_or_serve(BUILDERS, main)``. ``contest`` starts each
contender as `python SCRIPT --serve NAME ARGS_JSON`: a warm process of its own (built and warmed up
once, malloc keeping freed memory as `jaxbert train` does), then the processes take turns, round by
round (jaxbert.bench.contest.alternate: every contender times `calls` calls per round), and each peer's
ratio is the median of the per-round ratios (jaxbert.bench.timing.round_ratio). A process each: torch's
and XLA's thread pools and allocators would get in each other's way in one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from jaxbert.bench.contest import WarmWorker, alternate, ratios_for
from jaxbert.bench.worker import REPLY_PREFIX


class ScriptWorker(WarmWorker):
    """WarmWorker over `python SCRIPT --serve NAME ARGS` in place of jaxbert.bench.worker."""

    def __init__(self, script: str, name: str, args: dict):
        self.name = name
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, script, "--serve", name, json.dumps(args)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._read()  # READY: built and warmed up


def contest(script: str, names: list[str], args: dict, rounds: int, calls: int = 1, say=print) -> tuple[dict, dict]:
    """(results {name: {"seconds", "per_round", "extra"}}, {peer: Ratio of names[0] / peer}) over `rounds`
    alternating rounds; the first name is the reference."""
    workers = {}
    try:
        for name in names:
            say(f"  starting {name} ...")
            workers[name] = ScriptWorker(script, name, args)
        results = alternate(workers, rounds, calls, say=say)
    finally:
        for w in workers.values():
            w.close()
    return results, ratios_for(results, reference=names[0])


def serve(builders: dict, name: str, args: dict, warmup: int = 2, pause: float = 0.5) -> None:
    """The --serve loop: build, warm up, READY, then "time K" / "finish" from stdin."""
    import time

    from jaxbert.train.allocator import keep_freed_memory
    keep_freed_memory()
    reply = lambda obj: print(REPLY_PREFIX + json.dumps(obj), flush=True)  # noqa: E731
    fn, extra = builders[name](args)
    for _ in range(warmup):
        fn()
    reply({"ready": True})
    for line in sys.stdin:
        verb, *rest = line.split() or [""]
        if verb == "time":
            seconds = []
            for _ in range(int(rest[0]) if rest else 1):
                time.sleep(pause)  # let the previous call's spinning threads go idle
                t0 = time.perf_counter()
                fn()
                seconds.append(time.perf_counter() - t0)
            reply({"seconds": seconds})
        elif verb == "finish":
            reply({"extra": extra()})
            return


def main_or_serve(builders: dict, main) -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(builders, sys.argv[2], json.loads(sys.argv[3]))
        return 0
    return main() or 0


def load_line() -> str:
    """The machine's load averages, read at that moment (the machine is shared: say how loaded it was)."""
    with open("/proc/loadavg") as f:
        one, five, fifteen = f.read().split()[:3]
    return f"load average {one} / {five} / {fifteen} (1 / 5 / 15 min)"


def matmul_rates(shapes, repeats: int = 8) -> list[tuple[tuple, float, float]]:
    """[(m, k, n), jax fp32 GFLOP/s, torch fp32 GFLOP/s] on each shape, each framework timed alone
    (benchmarks/matmul_bench.py's timing)."""
    import jax
    import jax.numpy as jnp
    import torch
    from matmul_bench import median_seconds
    out = []
    for m, k, n in shapes:
        gflop = 2 * m * k * n / 1e9
        a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
        dot = jax.jit(jnp.dot)
        j = gflop / median_seconds(lambda: dot(a, b).block_until_ready(), repeats)
        ta, tb = torch.ones(m, k), torch.ones(k, n)
        t = gflop / median_seconds(lambda: torch.mm(ta, tb), repeats)
        out.append(((m, k, n), j, t))
    return out


def print_rates(rates) -> None:
    print(f"{'fp32 matmul m x k x n':>24s} {'jax GFLOP/s':>12s} {'torch GFLOP/s':>14s} {'torch / jax':>11s}")
    for (m, k, n), j, t in rates:
        print(f"{f'{m} x {k} x {n}':>24s} {j:12.0f} {t:14.0f} {t / j:11.2f}")
