"""Per-device HBM of one train step at batches you pick, compiled for a target: jaxbert's or the old port's.

A largest-batch search (`jaxbert bench --target ... --only aot-max`) compiles many batches; a few points give
the slope, and `--dump DIR` keeps XLA's dump of each compile, whose `*memory-usage-report.txt` lists every HBM
buffer with its shapes. The bert-large figures in README:

  python benchmarks/hbm_points.py --target v4:2x2x1 --batches 16 32 --dump /tmp/hbm
  python benchmarks/hbm_points.py --target v4:2x2x1 --contender transformers-flax --batches 16 59

jaxbert compiles --recipe (default bert-large-lamb-phase2) as the aot-max rows do: scan + remat full + FSDP,
one micro-batch; --set overrides more. The old port (transformers 4.57's FlaxBertForMaskedLM) compiles the
recipe's model at its sequence length with its gradient checkpointing (--no-checkpointing for without).
Prints one JSON line per batch: HBM, arguments, temporaries and host temporaries (GiB; remat offload keeps
the layer inputs there), whether libtpu refused the compile for want of memory (then HBM is its estimate),
and compile seconds. Needs libtpu for a TPU
target (pip install 'jaxbert[tpu]'); old-port bert-large compiles take most of an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os

LAYOUT = ["model.scan_layers=true", "model.remat_policy=full", "parallel.fsdp=true", "train.accum_steps=1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v4:2x2x1")
    ap.add_argument("--contender", default="jaxbert", choices=["jaxbert", "transformers-flax"])
    ap.add_argument("--recipe", default="bert-large-lamb-phase2")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-checkpointing", action="store_true", help="the old port without gradient_checkpointing")
    ap.add_argument("--batches", type=int, nargs="+", default=[16])
    ap.add_argument("--dump", default=None, help="XLA dump folder (modules numbered in compile order)")
    args = ap.parse_args()
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if args.dump:  # XLA reads its flags once, when the first backend starts: before jax is imported
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={args.dump}").strip()
    import jax.numpy as jnp

    from jaxbert.bench.flax_port import compile_old_port_step
    from jaxbert.plan import compile_step
    from jaxbert.train import recipe as recipes

    devices = compile_step.target_devices(args.target)
    r = recipes.load(args.recipe, LAYOUT + args.set)
    cfg = r.model_config()
    for b in args.batches:
        if args.contender == "jaxbert":
            c = compile_step.compile_train_step(r, cfg, devices, b)
        else:
            c = compile_old_port_step(cfg, devices, b, r.data.seq_len, jnp.dtype(r.model.dtype),
                                      gradient_checkpointing=not args.no_checkpointing)
        print(json.dumps({"contender": args.contender, "batch": b, "hbm_gib": round(c.hbm / 2**30, 2),
                          "arguments_gib": round(c.arguments / 2**30, 2),
                          "temporaries_gib": round(c.temporaries / 2**30, 2),
                          "host_temporaries_gib": round(c.host_temporaries / 2**30, 2),
                          "refused": c.out_of_memory,  # libtpu refused it for want of memory: hbm is its estimate
                          "compile_s": round(c.lower_s + c.compile_s)}), flush=True)


if __name__ == "__main__":
    main()
