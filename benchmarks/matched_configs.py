"""Issue 35 part 1: jaxbert's train step in the configurations matched against the old Flax port.

bert-base MLM (the bert-base-phase1 recipe), 32 x 128 per device, bf16 compute, fp32 params and AdamW
moments, replicated params (no FSDP), one micro-batch, compiled for a TPU topology (default v4:2x2x1)
exactly as `jaxbert bench --target` compiles its aot rows (jaxbert.plan.compile_step.compile_train_step).
Layouts: scan-full (scan_layers + remat full: compared on HBM) and unscanned-full (layers unrolled + remat
full: compared on bytes accessed; a scanned step's cost analysis counts its loop body once).

Prints, per layout, XLA's memory_analysis (HBM = arguments + outputs - aliased + temporaries) and
cost_analysis bytes, then the table against the old port's figures (constants below). --dump D keeps XLA's
dump of each compile in D/LAYOUT (libtpu writes `*memory-usage-report.txt`, every buffer at the peak);
--report prints that report's largest buffers.

  python benchmarks/matched_configs.py [--target v4:2x2x1] [--only scan-full] [--dump D] [--report 25]

Each layout compiles in its own process (libtpu). Needs libtpu (pip install 'jaxbert[tpu]').
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

# transformers 4.57 FlaxBertForMaskedLM with gradient_checkpointing, compiled on v4-8 with libtpu, per issue 35
OLD_PORT_HBM_GIB = 1.73
OLD_PORT_GB_ACCESSED = 32.8
GOAL_HBM, GOAL_BYTES = 0.8, 0.9
LAYOUTS = {"scan-full": ["model.scan_layers=true"], "unscanned-full": ["model.scan_layers=false"]}
COMMON = ["model.remat_policy=full", "parallel.fsdp=false", "train.accum_steps=1"]


def compile_layout(layout: str, target: str, batch: int, sets: list[str]) -> dict:
    from jaxbert.plan import compile_step
    from jaxbert.train import recipe as recipes

    r = recipes.load("bert-base-phase1", LAYOUTS[layout] + COMMON + sets)
    c = compile_step.compile_train_step(r, r.model_config(), compile_step.target_devices(target), batch)
    gib = lambda n: round(n / 2**30, 3)
    return {"layout": layout, "hbm_gib": gib(c.hbm), "arguments_gib": gib(c.arguments), "outputs_gib": gib(c.outputs),
            "aliased_gib": gib(c.aliased), "temporaries_gib": gib(c.temporaries),
            "gb_accessed": None if c.bytes_accessed is None else round(c.bytes_accessed / 1e9, 2),
            "compile_s": round(c.lower_s + c.compile_s)}


_SIZE = {"B": 1, "K": 2**10, "KiB": 2**10, "M": 2**20, "MiB": 2**20, "G": 2**30, "GiB": 2**30}


def report_lines(dump: str, top: int) -> list[str]:
    """The head of the train step's memory-usage report in a dump folder (libtpu's own text)."""
    files = sorted(glob.glob(os.path.join(dump, "*train_step*memory-usage-report.txt")), key=os.path.getsize)
    if not files:
        return [f"(no memory-usage report in {dump})"]
    with open(files[-1]) as f:
        return [os.path.basename(files[-1])] + f.read().splitlines()[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v4:2x2x1")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--report", type=int, default=0, help="print this many lines of each memory-usage report")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(compile_layout(args.worker, args.target, args.batch, args.set)))
        return
    rows = {}
    for layout in args.only:
        env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_SKIP_MDS_QUERY": "1"}
        if args.dump:  # XLA reads its flags when the backend starts: set them for the worker
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={os.path.join(args.dump, layout)}").strip()
        cmd = [sys.executable, __file__, "--worker", layout, "--target", args.target, "--batch", str(args.batch)]
        cmd += [a for s in args.set for a in ("--set", s)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{layout}: failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
            continue
        rows[layout] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(rows[layout]), flush=True)
        if args.dump and args.report:
            print("\n".join(report_lines(os.path.join(args.dump, layout), args.report)), flush=True)
    print("\n| configuration (v4:2x2x1, 32 x 128 per device) | measure | old port | jaxbert | ratio | goal |")
    print("|---|---|---|---|---|---|")
    if "scan-full" in rows:
        h = rows["scan-full"]["hbm_gib"]
        print(f"| scan + remat full | HBM per device GiB | {OLD_PORT_HBM_GIB} | {h:.2f} | {h / OLD_PORT_HBM_GIB:.2f}x "
              f"| <= {GOAL_HBM}x |")
    if "unscanned-full" in rows:
        b = rows["unscanned-full"]["gb_accessed"]
        h = rows["unscanned-full"]["hbm_gib"]
        print(f"| unrolled + remat full | GB accessed | {OLD_PORT_GB_ACCESSED} | {b:.1f} | {b / OLD_PORT_GB_ACCESSED:.2f}x "
              f"| <= {GOAL_BYTES}x |")
        print(f"| unrolled + remat full | HBM per device GiB | {OLD_PORT_HBM_GIB} | {h:.2f} | {h / OLD_PORT_HBM_GIB:.2f}x "
              f"| <= {GOAL_HBM}x |")


if __name__ == "__main__":
    main()
