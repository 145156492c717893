"""The MLM train step with the plain [B, M, V] logits against the loss over vocabulary chunks
(ModelOptions.vocab_loss_chunk, jaxbert.model.vocab_loss): compiled temp memory and step time.

    python benchmarks/vocab_loss_bench.py [--vocab 128256] [--hidden 768] [--layers 1] [--batch 8] [--seq 512]
                                          [--mask-rate 0.3] [--chunks 8192] [--repeats 3]

The model is a BERT (tied decoder, float32, AdamW) of --layers layers of hidden --hidden (12 heads of 64 at
768, intermediate 4 x hidden) with EuroBERT's 128,256-token vocabulary; the batch is --batch rows of --seq
tokens with --mask-rate of them masked (M = data.masking.masked_slots prediction slots per row: 160 at 512 and
30%), synthetic (train.sources.SyntheticMLM), one micro-batch. Each variant's step is compiled ahead of time
for this machine's default device and its memory_analysis printed (temp bytes: what the step allocates beyond
its arguments and outputs), then timed: the median of --repeats steps after two warm-up steps, the state
donated and fed back as the training loop does. "plain" is vocab_loss_chunk=0, each of --chunks a chunked
variant. The [B, M, V] float32 logits alone are B * M * V * 4 bytes (656.6 MB at the defaults).
"""

from __future__ import annotations

import argparse
import platform
import subprocess

from matmul_bench import median_seconds  # this folder's: the script runs as benchmarks/...py


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--mask-rate", type=float, default=0.3)
    parser.add_argument("--chunks", default="8192", help="comma-separated chunk sizes of the chunked variants")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxbert import BertConfig, BertForMaskedLM
    from jaxbert.data.masking import masked_slots
    from jaxbert.engine.optim import make_optimizer
    from jaxbert.engine.step import TrainState
    from jaxbert.model.options import ModelOptions
    from jaxbert.train.mlm import train_step
    from jaxbert.train.recipe import OptimSection
    from jaxbert.train.sources import SyntheticMLM

    B, T, V, H = args.batch, args.seq, args.vocab, args.hidden
    M = masked_slots(T, args.mask_rate)
    cfg = BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=args.layers, num_attention_heads=max(1, H // 64),
                     intermediate_size=4 * H, max_position_embeddings=T)
    src = SyntheticMLM(V, B, T, seed=0, mask_rate=args.mask_rate)
    batch = {k: jnp.asarray(v[None]) for k, v in next(src).items()}
    assert batch["masked_positions"].shape == (1, B, M)
    real = float(np.asarray(batch["masked_weights"]).sum())
    print(f"{cpu_name()}, {jax.devices()[0].device_kind}, jax {jax.__version__}; BERT {args.layers}x{H}, V={V:,}, "
          f"batch {B}x{T}, M={M} slots per row ({real:.0f} masked tokens in all); [B, M, V] float32 = "
          f"{B * M * V * 4:,} bytes")
    print(f"{'variant':>14s} {'temp bytes':>15s} {'argument bytes':>15s} {'step s (median)':>16s}  mlm_loss")
    ids = jnp.zeros((1, 8), jnp.int32)
    variants = [("plain", 0)] + [(f"chunks of {c}", int(c)) for c in args.chunks.split(",")]
    for name, chunk in variants:
        model = BertForMaskedLM(cfg, ModelOptions(vocab_loss_chunk=chunk))
        params = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
        tx, schedule = make_optimizer(OptimSection(learning_rate=1e-4, warmup_steps=0, schedule="constant"), 100)
        state = TrainState.create(model.apply, params, tx, schedule)
        del params
        step = jax.jit(train_step, donate_argnums=0)
        compiled = step.lower(state, batch, jax.random.PRNGKey(1)).compile()
        mem = compiled.memory_analysis()
        box = {"state": state, "metrics": None}
        del state

        def run():
            box["state"], box["metrics"] = compiled(box["state"], batch, jax.random.PRNGKey(1))
            jax.block_until_ready(box["metrics"])

        seconds = median_seconds(run, args.repeats)
        m = jax.device_get(box["metrics"])
        loss = float(m["mlm_loss_sum"]) / float(m["mlm_weight"])
        print(f"{name:>14s} {mem.temp_size_in_bytes:>15,d} {mem.argument_size_in_bytes:>15,d} {seconds:>16.3f}  "
              f"{loss:.4f}", flush=True)
        del box, compiled, step


if __name__ == "__main__":
    main()
