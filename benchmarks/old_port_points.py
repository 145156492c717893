"""The old port's HBM at chosen batches: transformers 4.57's FlaxBertForMaskedLM step compiled for a TPU target.

Its largest-batch search (`jaxbert bench --target ... --only aot-max`) needs up to 13 GB of compiler memory
and most of an hour per bert-large compile on 2 cores; a few points at batches you pick give its slope:

  python benchmarks/old_port_points.py --target v4:2x2x1 --preset bert-large-uncased --seq-len 512 \\
      --checkpointing --batches 16 59

Prints one JSON line per batch: per-device HBM (GiB), arguments, temporaries, compile seconds. Needs libtpu
for a TPU target (pip install 'jaxbert[tpu]') and transformers<5.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v4:2x2x1")
    ap.add_argument("--preset", default="bert-large-uncased")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--checkpointing", action="store_true", help="the port's gradient_checkpointing flag")
    ap.add_argument("--batches", type=int, nargs="+", default=[16])
    args = ap.parse_args()
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax.numpy as jnp

    from jaxbert.bench.oldport import compile_old_port_step
    from jaxbert.model.config import preset
    from jaxbert.train import aot

    aot.check_target(args.target)
    devices = aot.target_devices(args.target)
    cfg = preset(args.preset)
    for b in args.batches:
        c = compile_old_port_step(cfg, devices, b, args.seq_len, jnp.bfloat16, gradient_checkpointing=args.checkpointing)
        print(json.dumps({"batch": b, "hbm_gib": round(c.hbm / 2**30, 2), "arguments_gib": round(c.arguments / 2**30, 2),
                          "temporaries_gib": round(c.temporaries / 2**30, 2),
                          "compile_s": round(c.lower_s + c.compile_s)}), flush=True)


if __name__ == "__main__":
    main()
