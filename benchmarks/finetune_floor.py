"""Where a fine-tuning step's time goes on this CPU, and the least it could take.

    PYTHONPATH=. python benchmarks/finetune_floor.py [--seq 16] [--batch 32] [--calls 15]

The shape is `jaxbert bench --only finetune-e2e`'s (all-MiniLM-L6-v2's config: 6 layers, hidden 384,
vocabulary 30,522; sequence classification, batch 32; its made sentences are cut to 16 tokens, as
both sides' batches are). Prints, median of --calls timed calls each after one warm call:

  - jaxbert's pieces, float32 on this CPU, the model as `jaxbert finetune` builds it (the last layer at
    [CLS] alone, ModelOptions.first_token_only): forward (loss), forward + backward (gradients), the
    clipped AdamW update alone (22.7 M params), and the whole step as `jaxbert finetune` compiles it;
  - transformers + PyTorch's step on the same batch (torch.optim.AdamW, clip_grad_norm_), as the
    e2e row's loop runs it;
  - what the machine can do: a float32 matmul of the encoder's largest shape (GFLOP/s) and a
    seven-array stream like AdamW's (GB/s);
  - the floor: the step's matmul FLOPs at that matmul rate, plus the AdamW update as measured, which
    no implementation of the same update on this machine beats; counted both as PyTorch computes
    (6 x encoder params x tokens) and with the last layer at [CLS] alone (its keys and values over
    every token, the rest of it at one token per row).

No test times anything; this is the measurement behind docs/benchmarks.md's fine-tuning floor.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import optax

from jaxbert.bench import contenders
from jaxbert.bench.machine import this_machine
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.classes import build_model
from jaxbert.model.options import ModelOptions

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512)


def timed(fn, calls: int) -> float:
    """Median seconds of `calls` calls of fn (which blocks until its result is ready), after a warm call."""
    fn()
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def jax_pieces(cfg: BertConfig, B: int, T: int, calls: int) -> dict:
    model = build_model("BertForSequenceClassification", cfg, ModelOptions(first_token_only=True))
    ids = jnp.ones((B, T), jnp.int32)
    types, mask, labels = jnp.zeros_like(ids), jnp.ones_like(ids), jnp.zeros((B,), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), ids, types)["params"]

    def loss(p):
        logits = model.apply({"params": p}, ids, types, mask, deterministic=True).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(2e-5, eps=1e-6, weight_decay=0.01))
    opt = tx.init(params)
    grads = jax.grad(loss)(params)

    def update(p, o, g):
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o

    fwd, bwd, upd = jax.jit(loss), jax.jit(jax.grad(loss)), jax.jit(update)
    out = {"forward": timed(lambda: fwd(params).block_until_ready(), calls),
           "forward+backward": timed(lambda: jax.block_until_ready(bwd(params)), calls),
           "adamw update": timed(lambda: jax.block_until_ready(upd(params, opt, grads)), calls)}
    step, _ = contenders.jax_finetune(cfg, B, T)
    out["jaxbert step"] = timed(step, calls)
    out["params"] = sum(x.size for x in jax.tree_util.tree_leaves(params))
    return out


def machine_rates(cfg: BertConfig, B: int, T: int, n_params: int, calls: int) -> dict:
    H, F = cfg.hidden_size, cfg.intermediate_size
    a, b = jnp.ones((B * T, H)), jnp.ones((H, F))
    mm = jax.jit(lambda a, b: a @ b)
    s = timed(lambda: mm(a, b).block_until_ready(), calls * 10)
    x = jnp.ones((n_params,), jnp.float32)
    stream = jax.jit(lambda p, g, m, v: (p - 1e-3 * m / (jnp.sqrt(v) + 1e-6), 0.9 * m + g, 0.99 * v + g * g))
    t = timed(lambda: jax.block_until_ready(stream(x, x, x, x)), calls)
    return {"matmul_gflops": 2 * B * T * H * F / s / 1e9, "stream_gbs": 7 * 4 * n_params / t / 1e9}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--calls", type=int, default=15)
    args = ap.parse_args(argv)
    B, T = args.batch, args.seq
    cfg = BertConfig(**MINILM)
    print(this_machine()[0], flush=True)
    print(f"all-MiniLM-L6-v2's shape, sequence classification, batch {B} x {T} tokens, float32", flush=True)
    jx = jax_pieces(cfg, B, T, args.calls)
    torch_step = contenders.torch_finetune(cfg, B, T)
    t_torch = timed(torch_step, args.calls)
    rates = machine_rates(cfg, B, T, jx["params"], args.calls)
    L, H, F = cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    per_layer = 4 * H * H + 2 * H * F
    flops = 6 * L * per_layer * B * T  # every layer at every token, as PyTorch computes
    # the last layer at [CLS]: keys and values (2 H^2) at every token, the rest (query, output, FFN) at one
    first_flops = 6 * ((L - 1) * per_layer * B * T + 2 * H * H * B * T + (per_layer - 2 * H * H) * B)
    rate = rates["matmul_gflops"] * 1e9
    floor_whole = flops / rate + jx["adamw update"]
    floor = first_flops / rate + jx["adamw update"]
    rows = [("jaxbert forward", jx["forward"]), ("jaxbert forward+backward", jx["forward+backward"]),
            ("jaxbert AdamW update (clipped, 22.7 M params)", jx["adamw update"]),
            ("jaxbert step (jaxbert finetune's)", jx["jaxbert step"]),
            ("transformers + PyTorch step", t_torch),
            (f"floor, every layer whole: {flops / 1e9:.1f} GFLOP at {rates['matmul_gflops']:.0f} GFLOP/s + AdamW",
             floor_whole),
            (f"floor, last layer at [CLS]: {first_flops / 1e9:.1f} GFLOP at that rate + AdamW", floor)]
    for name, s in rows:
        print(f"{name:<62} {s * 1e3:8.1f} ms", flush=True)
    print(f"machine: float32 matmul [{B * T}x{H}]@[{H}x{F}] {rates['matmul_gflops']:.0f} GFLOP/s; "
          f"AdamW-like stream of 7 x {jx['params'] / 1e6:.1f} M floats {rates['stream_gbs']:.1f} GB/s")
    print(f"PyTorch step / jaxbert step: {t_torch / jx['jaxbert step']:.2f}x; "
          f"PyTorch step / floor: {t_torch / floor:.2f}x (the most any step of the same update could gain here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
