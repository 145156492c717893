"""`jaxbert bench`: jaxbert and transformers (PyTorch) on the same work, each in its own process.

The first line printed is the machine: CPU model name, x86-64 level and notable extensions (from
/proc/cpuinfo), cores, jax/torch/transformers versions. The contenders of a work alternate in
rounds, each warm in its own process; a peer's jaxbert/peer ratio is the median of the per-round
ratios with their min-max and IQR, marked "not judged" when the IQR is over 10% of the median or
there were fewer than 3 rounds (jaxbert.bench.timing). finetune-e2e and predict time the
`jaxbert finetune` / `jaxbert predict` commands against transformers + PyTorch end to end
(jaxbert.bench.e2e). --json rows and --markdown tables name the machine on every row.

With --target TOPOLOGY (e.g. v4:2x2x1): compile-only figures of the train
steps for that TPU topology (needs libtpu: the tpu extra), beside
transformers 4.57's Flax step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from jaxbert.bench.target import run_target_bench, target_table
from jaxbert.bench.contest import run_worker
from jaxbert.bench.harness import Bench, command_line, work_names
from jaxbert.bench.timing import MIN_ROUNDS, NOISY_SPREAD, check_only, markdown_table
from jaxbert.fs import atomic_write_text
from jaxbert.model.options import ATTENTION_IMPLS
from jaxbert.plan.compile_step import check_target


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="fewer repeats and shapes, no torch.compile")
    p.add_argument("--only", nargs="*", default=None,
                   help="run only works whose name starts with one of these (e.g. train infer)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed calls of the single-contender works (compile, convert)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds of jaxbert, peer, jaxbert, peer, ... per work, each contender warm in its own "
                        "process, one timed call each per round (default 7 with --quick, else 11)")
    p.add_argument("--e2e-rounds", type=int, default=None,
                   help="rounds of the end-to-end rows (finetune-e2e, predict), each a fresh command (default 3)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="jaxbert compute dtype (default: bfloat16 on a GPU, float32 elsewhere)")
    p.add_argument("--attention", default=None, choices=list(ATTENTION_IMPLS),
                   help="jaxbert attention (default: dot_product, jax.nn.dot_product_attention, on a GPU; einsum "
                        "elsewhere; the ModernBERT rows: auto, i.e. blocked off a TPU)")
    p.add_argument("--no-torch", action="store_true", help="time jaxbert alone (no transformers contender)")
    p.add_argument("--malloc", default="keep", choices=["keep", "system", "tcmalloc"],
                   help="allocator of every worker process: keep = glibc malloc set to keep freed memory, "
                        "as `jaxbert train` sets it (jaxbert.train.allocator); system = glibc as it comes; "
                        "tcmalloc = LD_PRELOAD libtcmalloc_minimal")
    p.add_argument("--target", default=None, metavar="TOPOLOGY",
                   help="compile only, for a TPU topology (v4:2x2x1, v5e:2x2; needs the tpu extra) "
                        "or 'local': per-chip HBM, FLOPs and bytes of the train steps (--quick: bert-base only)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)


def run(args) -> int:
    if args.target is not None:
        return _run_target(args)
    check_only(args.only, work_names(args.quick))  # before a worker starts
    bench = Bench(args)
    bench.run()
    table = markdown_table(bench.records, machine=bench.machine_tag)
    print("\n" + table)
    print(f"\nmachine: {bench.machine()}")
    noisy = [f"{r.work} {r.contender}" for r in bench.records if r.ratio is not None and r.ratio.verdict != "ok"]
    if noisy:
        print(f"too noisy to judge (IQR of the per-round ratios over {NOISY_SPREAD:.0%} of their median, "
              f"or under {MIN_ROUNDS} rounds): {'; '.join(noisy)}")
    if args.json:
        atomic_write_text(args.json, json.dumps([r.to_json(bench.machine()) for r in bench.records], indent=2) + "\n")
    if args.markdown:
        atomic_write_text(args.markdown, f"Machine: {bench.machine()}\n\nCommand: `{command_line(args)}`\n\n{table}\n")
    return 0


def _run_target(args) -> int:
    check_target(args.target)  # before any worker: a missing libtpu is one clear line
    # Compile-only workers hold no TPU: several may load libtpu at once (another bench, a plan).
    env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    records = run_target_bench(args, lambda spec: run_worker(spec, env))
    table = target_table(records, args.target)
    print("\n" + table)
    command = f"jaxbert bench --target {args.target}" + (" --quick" if args.quick else "") + (
        " --only " + " ".join(args.only) if args.only else "")
    if args.json:
        args.json.write_text(json.dumps([r.to_json() for r in records], indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(f"Command: `{command}`\n\n{table}\n")
    return 0
