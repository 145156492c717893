"""How many train steps a batch-size warmup compiles, and what its padding costs (#50.27).

1. The shipped recipes with a batch-size warmup, on the devices their comments plan for: the micro-batch
   counts the warmup goes through (each was one compiled train step before the counts were bucketed),
   the compiled shapes now (jaxbert.train.batch_warmup.BatchWarmup.buckets), and the padding's cost:
   compiled micro-batches over the micro-batches of real rows, across the warmup's steps.
2. A tiny run measured: `jaxbert train` on the synthetic source, 1 -> 16 micro-batches of 2 sequences over
   the first 2,048 tokens, 20 steps (11 counts); XLA backend compiles counted by jax.monitoring (the train step's, the
   eval step's and any small helper's), and the distinct batch shapes the train step was called with.

    python benchmarks/warmup_compiles.py [--steps 20]

Run it on an older tree (PYTHONPATH=OLD python benchmarks/warmup_compiles.py) for the figures before.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import yaml  # noqa: E402

from jaxbert.train.batch_warmup import BatchWarmup  # noqa: E402

# (recipe, devices, start sequences, warmup tokens, per-device rows, accumulation, seq_len)
RECIPES = [("modernbert-base", 8, 768, 50 * 10**9, 36, 16, 1024),
           ("modernbert-large", 8, 768, 50 * 10**9, 56, 11, 1024),
           ("modernbert-tiny-phase1", 1, 8, 100_000, 8, 2, 128)]


def recipe_figures() -> None:
    print(f"{'recipe':24s} {'devices':>7s} {'counts':>7s} {'shapes now':>10s} {'warmup steps':>12s} {'padding':>8s}")
    for name, devices, start, tokens, rows, accum, seq_len in RECIPES:
        w = BatchWarmup(start, tokens, rows * devices, accum, seq_len)
        counts, s = [], 0
        while w.micro_batches(s) < accum:
            counts.append(w.micro_batches(s))
            s += 1
        counts.append(accum)
        buckets = getattr(w, "buckets", None)
        shapes = len({w.bucket(n) for n in counts}) if buckets else len(set(counts))
        padding = sum(w.bucket(n) for n in counts[:-1]) / sum(counts[:-1]) if buckets else 1.0
        print(f"{name:24s} {devices:7d} {len(set(counts)):7d} {shapes:10d} {s:12,d} {padding:8.3f}x")


def measured_run(steps: int) -> None:
    from jaxbert.cli.main import main as jaxbert
    from jaxbert.train import loop

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(secs) if event == "/jax/core/compile/backend_compile_duration"
        else None)
    shapes = []
    batches = loop.MlmTask.batches

    def recorded(self, start):
        for batch, state in batches(self, start):
            shapes.append(batch["input_ids"].shape[0])
            yield batch, state
    loop.MlmTask.batches = recorded
    tiny = {"name": "warmup-compiles",
            "model": {"preset": "bert-tiny", "config": {"hidden_size": 32, "num_hidden_layers": 1,
                                                       "num_attention_heads": 2, "intermediate_size": 64,
                                                       "vocab_size": 64, "max_position_embeddings": 32}},
            "data": {"source": "synthetic", "seq_len": 16, "mask_rate": 0.25},
            "train": {"steps": steps, "per_device_batch_size": 2, "accum_steps": 16, "log_every": steps,
                      "eval_every": 0, "eval_batches": 1, "batch_warmup_start": 2, "batch_warmup_tokens": 2048},
            "checkpoint": {"every_steps": steps, "keep": 1}, "outputs": {"plot": False}}
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(yaml.safe_dump(tiny))
        before = len(compiles)
        assert jaxbert(["train", "--config", str(recipe), "--workdir", str(Path(tmp) / "wd")]) == 0
    ran = shapes[:steps]
    print(f"tiny run, {steps} steps: train-step batch shapes {sorted(set(ran))} ({len(set(ran))}); "
          f"XLA backend compiles {len(compiles) - before}, {sum(compiles[before:]):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    recipe_figures()
    measured_run(args.steps)


if __name__ == "__main__":
    main()
