"""Check the step-time bound (jaxbert.plan.roofline) where a step can run, and print it where one cannot.

On this machine (default): the peak is the best of several calls of the bench's roofline matmul (2048^2
fp32), the memory bandwidth the best of several in-place passes over a 1 GiB array (2 GiB moved), both
measured before the first model and again after each, the best of all kept;
then the loop's train step (built from the recipe as jaxbert.plan.compile_step builds it, fp32 compute,
one device) of each model is compiled, bounded from its HLO with those two figures, and timed. The
measured step must never beat the bound; how far above it sits is what the bound leaves out.

  PYTHONPATH=. python benchmarks/roofline_check.py [--models bert-tiny bert-small bert-base-uncased]
                                                   [--batch 8] [--seq-len 128] [--repeats 5]

With --target TOPOLOGY (needs libtpu): the shipped recipes compiled as they ship for that TPU topology,
their bound with the device's published figures (jaxbert.devices), the sequences/s per chip it allows
and the MFU ceiling. Nothing runs.

  python benchmarks/roofline_check.py --target v4:2x2x1 --recipes bert-base-phase1 bert-large-lamb-phase2
                                     [--hlo-dir DIR [--from-hlo]]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from jaxbert import devices as devs
from jaxbert.plan import batch_search, compile_step, roofline
from jaxbert.train import recipe as recipes


def best_rate(fn, amount: float, repeats: int) -> tuple[float, float]:
    """(best, median) of amount / seconds over `repeats` calls after one warm-up."""
    fn()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        rates.append(amount / (time.perf_counter() - t0))
    return max(rates), statistics.median(rates)


def machine_figures(repeats: int) -> tuple[float, float]:
    n = 2048
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.dot)
    peak, peak_med = best_rate(lambda: mm(a, b).block_until_ready(), 2 * n**3, repeats)
    # 1 GiB read and written in place (the argument donated): a fresh output buffer would time the kernel
    # mapping 1 GiB of new pages, not the memory's bandwidth
    buf = {"x": jnp.ones((2**28,), jnp.float32)}
    scale = jax.jit(lambda v: v * 1.0000001, donate_argnums=0)

    def copy():
        buf["x"] = scale(buf["x"])
        buf["x"].block_until_ready()
    bw, bw_med = best_rate(copy, 2 * 2**30, repeats)
    print(f"peak: {peak / 1e9:.1f} GFLOP/s (best of {repeats} 2048^2 fp32 matmuls; median {peak_med / 1e9:.1f}); "
          f"bandwidth: {bw / 1e9:.2f} GB/s (best of {repeats} in-place passes over 1 GiB, read + written; median {bw_med / 1e9:.2f})", flush=True)
    return peak, bw


def cpu_check(args) -> None:
    """Times every model first, measuring the machine's peak and bandwidth again after each (a shared machine's
    load moves): the bounds use the best figures seen in the whole run, so no model is bounded by a dip."""
    repeats = max(args.repeats, 10)
    peak, bw = machine_figures(repeats)
    rows = []
    for model in args.models:
        r = recipes.load("bert-base-phase1", [f"model.preset={model}", "model.dtype=float32", "parallel.fsdp=false",
                                              "model.remat_policy=none", f"data.seq_len={args.seq_len}",
                                              f"train.per_device_batch_size={args.batch}", "train.accum_steps=1"])
        cfg = r.model_config()
        compiled, run = compile_step.runnable_train_step(r, cfg, jax.devices()[:1], args.batch)
        run()
        secs = []
        for _ in range(args.repeats):
            time.sleep(0.2)
            t0 = time.perf_counter()
            run()
            secs.append(time.perf_counter() - t0)
        rows.append((model, compiled.as_text(), secs, batch_search.model_flops_per_device(r, cfg, args.batch)))
        p, b = machine_figures(repeats)
        peak, bw = max(peak, p), max(bw, b)
    print(f"\nbounds with the best seen: peak {peak / 1e9:.1f} GFLOP/s, bandwidth {bw / 1e9:.2f} GB/s")
    print("\n| model | B x T | measured s (best) | median s | bound s | measured / bound | compute s | memory s | "
          "memory-bound share | bound GFLOP | bound GB | MFU ceiling |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model, hlo, secs, model_flops in rows:
        b = roofline.step_bound(hlo, peak, bw)
        best, med = min(secs), statistics.median(secs)
        mfu = b.mfu_ceiling(model_flops)
        print(f"| {model} | {args.batch} x {args.seq_len} | {best:.4f} | {med:.4f} | {b.seconds:.4f} | "
              f"{best / b.seconds:.2f} | {b.compute_s:.4f} | {b.memory_s:.4f} | {b.memory_bound_share:.2f} | "
              f"{b.flops / 1e9:.1f} | {b.bytes / 1e9:.2f} | {mfu:.1%} |", flush=True)


def target_check(args) -> None:
    devices = compile_step.target_devices(args.target)
    per_chip = devs._devices_on_chip(devices[0], devices)
    facts = devs.device_roofline(devices[0], devices)
    print(f"{args.target}: {len(devices)} x {devices[0].device_kind}, {per_chip} per chip; per device: peak "
          f"{facts[0] / 1e12:.1f} TFLOP/s, HBM {facts[1] / 1e9:.0f} GB/s, interconnect "
          f"{facts[2] / 1e9 if facts[2] else 0:.0f} GB/s", flush=True)
    print("\n| recipe | per device | HBM GiB | bound ms | compute ms | memory ms | collectives ms | "
          "sequences/s per chip at bound | MFU ceiling | compile s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.recipes:
        r = recipes.load(name, list(args.set))
        cfg = r.model_config()
        B, A = r.train.per_device_batch_size, r.train.accum_steps
        hlo = None if args.hlo_dir is None else f"{args.hlo_dir}/{args.target.replace(':', '-')}/{r.name}"
        if args.from_hlo:  # bound a step compiled before (--hlo-dir) again, without compiling it
            b = roofline.step_bound(open(f"{hlo}/train_step.hlo.txt").read(), *facts)
            cost = compile_step.StepCost(B, 0, 0, 0, 0, 0, None, None, 0.0, 0.0, bound=b)
        else:
            cost = compile_step.compile_train_step(r, cfg, devices, B, hlo_dir=hlo)
            b = cost.bound
        mfu = b.mfu_ceiling(batch_search.model_flops_per_device(r, cfg, B))
        hbm = "—" if args.from_hlo else f"{cost.hbm / 2**30:.2f}"
        print(f"| {r.name} | {A} x {B} x {r.data.seq_len} | {hbm} | {b.seconds * 1e3:.1f} | "
              f"{b.compute_s * 1e3:.1f} | {b.memory_s * 1e3:.1f} | {b.collective_s * 1e3:.1f} | "
              f"{B * A * per_chip / b.seconds:,.0f} | {mfu:.1%} | {cost.lower_s + cost.compile_s:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["bert-tiny", "bert-small", "bert-base-uncased"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--target", default=None, help="a TPU topology: compile the recipes for it, run nothing")
    ap.add_argument("--recipes", nargs="+", default=["bert-base-phase1", "bert-large-lamb-phase2"])
    ap.add_argument("--hlo-dir", default=None, help="with --target: keep each step's optimized HLO here")
    ap.add_argument("--from-hlo", action="store_true",
                    help="with --target and --hlo-dir: bound the steps kept there instead of compiling them")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for --target recipes")
    args = ap.parse_args()
    target_check(args) if args.target else cpu_check(args)


if __name__ == "__main__":
    main()
