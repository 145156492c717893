"""Where a compiled train step's roofline bound goes, operation by operation.

    PYTHONPATH=.:LIBTPU_DIR TPU_SKIP_MDS_QUERY=1 ALLOW_MULTIPLE_LIBTPU_LOAD=1 \
        python benchmarks/step_ops.py v5e:2x2 configs/train/modernbert-base.yaml 36 [--set KEY=VALUE ...] [--top 45]

Compiles the recipe's train step for one per-device batch on a TPU topology (libtpu, compile only, as
`jaxbert plan --target` does), prints XLA's bytes accessed, its HBM and the bound (jaxbert.plan.roofline:
per operation the larger of FLOPs / peak and bytes / bandwidth, summed, plus collectives), then the
operations grouped by their source (`op_name` with layer indices folded, and the opcode), costliest
first: for each, the bound's time, its compute and memory parts and how many times the step runs it. The figures are for the whole
step (all `accum_steps` micro-batches). The HLO is written to --hlo-dir (train_step.hlo.txt) for reading.
"""

from __future__ import annotations

import argparse
import collections
import re

from jaxbert.plan import compile_step, hlo_module
from jaxbert.train import recipe as recipes


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", help="TPU topology, e.g. v5e:2x2 or v4:2x2x1")
    ap.add_argument("recipe", help="recipe name or YAML path")
    ap.add_argument("batch", type=int, help="per-device batch to compile")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    ap.add_argument("--top", type=int, default=45, help="operation groups to print")
    ap.add_argument("--hlo-dir", default="step_ops_hlo", help="where train_step.hlo.txt goes")
    args = ap.parse_args(argv)
    r = recipes.load(args.recipe, args.set)
    cost = compile_step.compile_train_step(r, r.model_config(), compile_step.target_devices(args.target),
                                           args.batch, hlo_dir=args.hlo_dir)
    b = cost.bound
    accessed = "?" if cost.bytes_accessed is None else f"{cost.bytes_accessed / 1e9:.2f}"
    print(f"XLA's bytes accessed {accessed} GB per device (cost_analysis)")
    print(f"HBM {cost.hbm / 2**30:.2f} GiB; bound {b.seconds * 1e3:.1f} ms (compute {b.compute_s * 1e3:.1f}, "
          f"memory {b.memory_s * 1e3:.1f}, collectives {b.collective_s * 1e3:.1f}; memory-bound share "
          f"{b.memory_bound_share:.2f}) for accum_steps {r.train.accum_steps}")
    with open(f"{args.hlo_dir}/train_step.hlo.txt") as f:
        module = hlo_module.HloModule(f.read())
    groups = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for op in module.operations():
        if op.collective_bytes:
            continue
        c, m = op.flops / b.peak_flops, op.bytes / b.memory_bandwidth
        g = groups[re.sub(r"\d+", "#", op.source)[-110:] + " :: " + op.opcode]
        g[0], g[1], g[2], g[3] = g[0] + max(c, m), g[1] + c, g[2] + m, g[3] + op.times
    print("    bound ms   compute ms    memory ms    times  source :: opcode")
    for name, (t, c, m, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{t * 1e3:12.2f} {c * 1e3:12.2f} {m * 1e3:12.2f} {n:8d}  {name}")


if __name__ == "__main__":
    main()
