"""The embedding kind's train step compiled for a TPU topology: fits, step-time bound, MFU ceiling (issue 52).

    PYTHONPATH=. TPU_SKIP_MDS_QUERY=1 ALLOW_MULTIPLE_LIBTPU_LOAD=1 python benchmarks/embedding_plan.py \
        --target v5e:4x4 [--recipe configs/finetune/modernbert-embed-stage1.yaml] [--model modernbert] \
        [--global-batch 16384] [--mini-batch-size 1024] [--seq-len 128] [--set KEY=VALUE ...] [--json J]

Lowers `jaxbert finetune --task embedding`'s own train step (jaxbert.finetune.kinds.embedding.step:
make_train_step, GradCache with the recipe's kinds.embedding.mini_batch_size, the chunks laid across the
devices as the run lays them) on the mesh runner for the topology's devices from shapes alone, as `jaxbert
plan` does for pretraining (libtpu, compile only: nothing is allocated or run), and reads XLA's HBM per
device and the roofline bound of its optimized HLO (jaxbert.plan.roofline). The model is the family's bare
encoder built from a config (no weights: `--model` is a preset or family name, modernbert = ModernBERT-base);
every text padded to --seq-len (the run buckets a batch to its longest text: this is its longest bucket).

Useful FLOPs per step: the encoder's forward and backward for every text of the global batch (6 N + 12 L H T
per token, no head; GradCache's first, embedding-only forward is recomputation, not counted) and the
similarity matrix's forward and backward (3 x 2 x B x B (C - 1) x D for B anchors, C columns, D dims). The MFU
ceiling is those FLOPs per device over (bound x peak).
"""

from __future__ import annotations

import argparse
import json
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxbert.devices import device_memory
from jaxbert.engine.optim import make_optimizer
from jaxbert.engine.parallel import MeshRunner
from jaxbert.finetune import recipe as finetune_recipes
from jaxbert.finetune.kinds.embedding import KIND, check_run
from jaxbert.finetune.kinds.embedding.step import INPUTS, column_key, make_train_step
from jaxbert.model.classes import build_model, dummy_inputs
from jaxbert.model.configs import build_config
from jaxbert.model.families import family_of
from jaxbert.model.flops import train_flops_per_token
from jaxbert.plan import compile_step

STAGE1 = "configs/finetune/modernbert-embed-stage1.yaml"


def useful_flops(cfg, global_batch: int, columns: int, seq_len: int) -> tuple[float, float]:
    """(encoder, similarity) training FLOPs of one global step: every text's forward and backward, no head;
    the [B, B (C - 1)] scores of dimension D, forward (2 B N D) and backward (twice that)."""
    encoder = train_flops_per_token(cfg, seq_len, 0.0) * global_batch * columns * seq_len
    similarity = 6 * global_batch * global_batch * (columns - 1) * cfg.hidden_size
    return encoder, similarity


def largest_f32_shapes(hlo_text: str, dim: int, top: int = 4) -> list[str]:
    """The largest float32 array shapes in the HLO with `dim` among their dimensions (the similarity matrix
    and its gradient hold the global candidate count), largest first."""
    seen = {}
    for m in re.finditer(r"f32\[([\d,]+)\]", hlo_text):
        dims = tuple(int(d) for d in m.group(1).split(","))
        if dim in dims:
            seen[dims] = int(np.prod(dims)) * 4
    return [f"f32[{','.join(map(str, d))}] ({n / 2**20:,.0f} MiB)"
            for d, n in sorted(seen.items(), key=lambda kv: -kv[1])[:top]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="v5e:4x4", help="TPU topology (v5e:4x4, v5e:2x2, v4:2x2x1) or local")
    ap.add_argument("--recipe", default=STAGE1, help="fine-tuning recipe (name or YAML path)")
    ap.add_argument("--model", default="modernbert", help="preset or family name of the encoder (no weights)")
    ap.add_argument("--global-batch", type=int, default=None,
                    help="anchors per step (default: the recipe's per_device_batch_size x the devices)")
    ap.add_argument("--mini-batch-size", type=int, default=None,
                    help="GradCache chunk, global (default: the recipe's kinds.embedding.mini_batch_size)")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per text (default: the recipe's max_length)")
    ap.add_argument("--columns", type=int, default=2, help="texts per row: anchor, positive, hard negatives")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    ap.add_argument("--hlo-dir", default=None, help="where to write train_step.hlo.txt")
    ap.add_argument("--json", default=None, help="write the figures as JSON")
    args = ap.parse_args(argv)

    r = finetune_recipes.load(args.recipe, args.set)
    options = KIND.options(dict(r.kinds.get("embedding") or {},
                                **({"mini_batch_size": args.mini_batch_size} if args.mini_batch_size else {})),
                           "kinds.embedding.")
    devices = compile_step.target_devices(args.target)
    n = len(devices)
    B = args.global_batch or r.train.per_device_batch_size * n
    C, L = args.columns, args.seq_len or r.data.max_length
    cfg = build_config(args.model, {})
    model_class = f"{family_of(cfg).class_prefixes[cfg.model_type]}{KIND.head}"
    cfg = build_config(args.model, {}, model_class=model_class)
    chunks = check_run(options, cfg.hidden_size, B, r.train.accum_steps, n)
    budget, source = device_memory(devices[0], devices)
    print(f"embedding step: {model_class} {cfg.num_hidden_layers}x{cfg.hidden_size}; global batch {B} rows x {C} "
          f"texts x {L} tokens ({B // n} rows per device); GradCache {chunks} chunks of {B // chunks} "
          f"({B // chunks // n} per device); pooling {options.pooling}, temperature {options.temperature}; "
          f"{r.model.dtype} compute, remat {r.model.remat_policy}, scan_layers {r.model.scan_layers}, "
          f"attention {r.model.attention_impl}, fsdp {r.parallel.fsdp}; {n} x {devices[0].device_kind}", flush=True)

    model = build_model(model_class, cfg, r.model.options())
    runner = MeshRunner(r.parallel, devices=devices)
    tx, schedule = make_optimizer(r.optim_for(10_000), 10_000)  # the schedule's length changes no shape
    dummy = dummy_inputs(model_class, 1, 8)
    runner.prepare(model, lambda: model.init_boxed(jax.random.PRNGKey(0), *dummy)["params"], tx, schedule,
                   r.train.norm_metrics)
    sharding = NamedSharding(runner.mesh, P(None, "data"))
    batch = {column_key(k, c): jax.ShapeDtypeStruct((1, B, L), jnp.int32, sharding=sharding)  # every column at L
             for c in range(C) for k in INPUTS}
    batch["valid"] = jax.ShapeDtypeStruct((1, B), jnp.int32, sharding=sharding)
    rng = jax.ShapeDtypeStruct((2,), np.uint32, sharding=runner.replicated)
    step = make_train_step(options.pooling, options.temperature, symmetric=options.symmetric,
                           dims=tuple(options.matryoshka_dims), chunks=chunks, groups=n)
    t0 = time.perf_counter()
    lowered = runner.compile_train(step).lower(runner.abstract, batch, rng)
    cost = compile_step.compiled_cost(lowered, devices, B // n, time.perf_counter() - t0, args.hlo_dir)
    encoder, similarity = useful_flops(cfg, B, C, L)
    per_device = (encoder + similarity) / n
    sim_bytes = B * B * (C - 1) * 4
    fits = cost.fits(budget) if budget else None
    out = {"target": args.target, "recipe": r.name, "model_class": model_class, "global_batch": B, "columns": C,
           "seq_len": L, "chunks": chunks, "devices": n, "budget_bytes": budget, "budget_source": source,
           "fits": fits, "cost": cost.to_json(), "useful_flops_per_device": per_device,
           "encoder_flops": encoder, "similarity_flops": similarity,
           "similarity_matrix": [B, B * (C - 1)], "similarity_f32_bytes": sim_bytes}
    print(f"\nHBM per device {cost.hbm / 2**30:.2f} GiB of {budget / 2**30:.2f} ({'fits' if fits else 'does NOT fit'}; "
          f"arguments {cost.arguments / 2**30:.2f}, temporaries {cost.temporaries / 2**30:.2f}); "
          f"compiled in {cost.lower_s + cost.compile_s:.0f} s")
    print(f"similarity matrix: [{B}, {B * (C - 1)}] scores per step, {sim_bytes / 2**30:.2f} GiB in float32 "
          f"over the global batch ({sim_bytes / n / 2**20:,.0f} MiB per device, rows split over {n})")
    if args.hlo_dir and not cost.out_of_memory:  # a compile refused for memory leaves no HLO
        with open(f"{args.hlo_dir}/train_step.hlo.txt") as f:
            shapes = largest_f32_shapes(f.read(), B * (C - 1))
        out["hlo_similarity_shapes"] = shapes
        print("float32 arrays of the compiled step with the candidate count among their dims: " + ", ".join(shapes))
    b = cost.bound
    if b is not None:
        mfu = b.mfu_ceiling(per_device)
        out["mfu_ceiling"] = mfu
        out["pairs_per_s_per_device_at_bound"] = B / n / b.seconds
        print(f"bound {b.seconds * 1e3:,.1f} ms per step (compute {b.compute_s * 1e3:,.1f} / memory "
              f"{b.memory_s * 1e3:,.1f} / collectives {b.collective_s * 1e3:,.1f}; memory-bound share "
              f"{b.memory_bound_share:.0%}); {B / n / b.seconds:,.0f} pairs/s per device at the bound")
        print(f"useful FLOPs per device {per_device / 1e12:.2f} TFLOP (encoder {encoder / n / 1e12:.2f}, similarity "
              f"{similarity / n / 1e12:.3f}); XLA's compiled FLOPs {b.flops / 1e12:.2f} TFLOP "
              f"({b.flops / per_device:.2f} x useful: GradCache's extra forward); MFU ceiling {mfu:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
