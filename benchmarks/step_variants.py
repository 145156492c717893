"""The leaner-step figures in README: one train step compiled with and without each change.

Compiles the bert-base-phase1 step (layers unrolled, no remat, replicated, 32 x 128 per device) for a
target, in one process per variant, and prints XLA's per-device HBM, GFLOP (and its ratio to the model
formula) and bytes accessed:

  baseline         the step as it ships (bf16 softmax in and out, bf16 loss gradient, grad norm shared
                   with clipping, dropout bits from the counter hash)
  fp32-residual    the softmax as jax.nn.softmax on float32 masked scores (float32 residual), as before
  fp32-loss-grad   the MLM loss by autodiff through float32 logits (a float32 [B, M, V] gradient)
  norm-metrics     also logs the update and param norms (train.norm_metrics=true)
  no-attn-dropout  attention dropout 0 (what drawing its random bits costs)
  threefry-dropout flax's nn.Dropout (jax.random.bernoulli, threefry) instead of the counter hash
  rbg-dropout      flax's nn.Dropout with the rbg generator instead of threefry
  bf16-moment      AdamW's first moment in bfloat16 (optim.mu_dtype=bfloat16)
  pallas-attention attention dropout 0 and attention through jax's Pallas TPU flash-attention kernel
                   (jax.experimental.pallas.ops.tpu.flash_attention, padding as segment ids, per device
                   under shard_map): what a fused attention kernel saves; compare with no-attn-dropout

  python benchmarks/step_variants.py [--target v4:2x2x1] [--only baseline rbg-dropout] [--hlo-dir D]

Needs libtpu for a TPU target (pip install 'jaxbert[tpu]'); each bert-base compile takes minutes on 2 cores.
--hlo-dir D writes D/VARIANT/train_step.hlo.txt for benchmarks/hlo_bytes.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

VARIANTS = ("baseline", "fp32-residual", "fp32-loss-grad", "norm-metrics", "no-attn-dropout", "threefry-dropout",
            "rbg-dropout", "bf16-moment", "pallas-attention")
BASE = ["model.scan_layers=false", "model.remat_policy=none", "parallel.fsdp=false"]


def compile_variant(variant: str, target: str, batch: int, hlo_dir: str | None) -> dict:
    import dataclasses

    import jax
    import jax.numpy as jnp
    import optax

    from jaxbert.model import attention
    from jaxbert.engine.step import make_train_step
    from jaxbert.plan import batch_search, compile_step
    from jaxbert.train import mlm
    from jaxbert.train import recipe as recipes

    over = list(BASE)
    if variant == "fp32-residual":
        def wide_softmax(scores, mask):  # float32 masked scores, float32 residual for the backward pass
            wide = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
            return jax.nn.softmax(wide, axis=-1).astype(scores.dtype)
        attention.masked_softmax = wide_softmax
    elif variant == "fp32-loss-grad":
        mlm.cross_entropy = lambda logits, labels: optax.softmax_cross_entropy_with_integer_labels(
            logits.astype(jnp.float32), labels)
    elif variant == "norm-metrics":
        over.append("train.norm_metrics=true")
    elif variant == "no-attn-dropout":
        over.append("model.config.attention_probs_dropout_prob=0.0")
    elif variant == "threefry-dropout":
        over.append("model.dropout_impl=threefry")
    elif variant == "bf16-moment":
        over.append("optim.mu_dtype=bfloat16")
    elif variant == "pallas-attention":
        over += ["model.config.attention_probs_dropout_prob=0.0", "model.attention_impl=dot_product"]
        jax.nn.dot_product_attention = _pallas_attention
    elif variant == "rbg-dropout":
        over.append("model.dropout_impl=threefry")
        forward = mlm.MLM.forward

        def rbg_forward(params, apply_fn, mb, rng, deterministic):
            key = jax.random.wrap_key_data(jax.random.bits(rng, (4,), jnp.uint32), impl="rbg")
            return forward(params, apply_fn, mb, key, deterministic)
        mlm.train_step = make_train_step(dataclasses.replace(mlm.MLM, forward=rbg_forward))
    r = recipes.load("bert-base-phase1", over)
    cfg = r.model_config()
    out = None if hlo_dir is None else os.path.join(hlo_dir, variant)
    cost = compile_step.compile_train_step(r, cfg, compile_step.target_devices(target), batch, hlo_dir=out)
    model = batch_search.model_flops_per_device(r, cfg, batch)
    return {"variant": variant, "hbm_gib": round(cost.hbm / 2**30, 2), "gflop": round(cost.flops / 1e9, 1),
            "xla_over_model": round(cost.flops / model, 3), "gb_accessed": round(cost.bytes_accessed / 1e9, 1),
            "compile_s": round(cost.compile_s)}


def _pallas_attention(q, k, v, bias=None, mask=None):
    """Stands in for jax.nn.dot_product_attention ([B, T, N, D] in and out, padding mask [B, N, T, S])."""
    import math

    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    from jax.sharding import PartitionSpec as P

    import flax.linen as nn

    from jaxbert.model.options import BATCH

    assert bias is None
    keep = mask[:, 0, 0, :].astype(jnp.int32)  # [B, S]: 1 = a token, 0 = padding

    def attend(q, k, v, keep):
        ids = fa.SegmentIds(q=keep, kv=keep)  # padding queries attend to padding: their rows are never read
        return fa.flash_attention(q, k, v, segment_ids=ids, sm_scale=1.0 / math.sqrt(q.shape[-1]))

    axis = dict(nn.get_logical_axis_rules()).get(BATCH)  # set while a runner splits the batch over a mesh
    if axis is not None:  # a Mosaic kernel is not partitioned by GSPMD: one call per device
        mesh = jax.sharding.get_abstract_mesh()
        attend = jax.shard_map(attend, mesh=mesh, in_specs=(P(axis),) * 4, out_specs=P(axis), check_vma=False)
    heads_first = lambda x: x.transpose(0, 2, 1, 3)
    return heads_first(attend(heads_first(q), heads_first(k), heads_first(v), keep))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v4:2x2x1")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--hlo-dir", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(compile_variant(args.worker, args.target, args.batch, args.hlo_dir)))
        return
    env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_SKIP_MDS_QUERY": "1"}
    print("| variant | HBM per device GiB | GFLOP | XLA / model FLOPs | GB accessed | compile s |\n|---|---|---|---|---|---|")
    for variant in args.only:
        cmd = [sys.executable, __file__, "--worker", variant, "--target", args.target, "--batch", str(args.batch)]
        if args.hlo_dir:
            cmd += ["--hlo-dir", args.hlo_dir]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {variant} | failed: {(done.stderr.strip().splitlines() or ['?'])[-1]} |||||", flush=True)
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {variant} | {r['hbm_gib']} | {r['gflop']:,} | {r['xla_over_model']} | {r['gb_accessed']} | "
              f"{r['compile_s']} |", flush=True)


if __name__ == "__main__":
    main()
