"""Padding and useful tokens/s of the MLM step with `data.packing` stream, documents and none.

    python benchmarks/packing_figures.py [--seq-len 64] [--batch 16] [--steps 40] [--repeats 5]

Two corpora: the embedded corpus (the default `jaxbert train` data: Python's topics and the stdlib's
docstrings, one document per topic or module, mostly long), and a made corpus of short documents:
the embedded corpus's paragraphs (text between blank lines) of 3 to 60 words, each one a document.
A WordPiece tokenizer (4,096 pieces, as tiny-demo) is trained on the embedded corpus; each corpus is
prepared in the three modes at --seq-len, and the padded share of the training rows is read from
the prepared rows themselves.

The step: tiny-demo's model (BertForMaskedLM 3x128, dropout off) and optimizer, the engine's
compiled MLM train step (jaxbert.train.mlm), batches of --batch rows read by MLMLoader from each
prepared folder (25% masking, as tiny-demo). Per repeat each mode runs --steps steps, modes
alternating, after one warm-up call each; useful tokens/s = non-padding tokens of the batches /
seconds, median over repeats. documents and none compile the same step (both carry segment ids);
stream carries none. Prints a Markdown table and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

MODES = ("stream", "documents", "none")


def short_corpus(path: Path, low: int = 3, high: int = 60) -> int:
    """The embedded corpus's paragraphs of low..high words as jsonl documents; returns their count."""
    from jaxbert.data.embedded import default_documents
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for _, doc, _ in default_documents():
            for para in doc.split("\n\n"):
                words = para.split()
                if low <= len(words) <= high:
                    f.write(json.dumps({"text": " ".join(words)}) + "\n")
                    n += 1
    return n


def padding_share(folder: Path) -> dict:
    from jaxbert.data.loader import metadata
    meta = metadata(folder)
    split = meta["splits"]["train"]
    rows = np.concatenate([np.load(folder / s["file"], mmap_mode="r") for s in split["shards"]])
    pad = int((rows == meta["special_ids"]["pad"]).sum())
    return {"rows": int(rows.shape[0]), "documents": split["documents"], "padded": pad / rows.size,
            "recorded_padding_tokens": split["padding_tokens"]}


def time_steps(folders: dict, seq_len: int, batch: int, steps: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    from jaxbert.data.loader import MLMLoader
    from jaxbert.engine import parallel
    from jaxbert.engine.optim import make_optimizer
    from jaxbert.model.classes import build_model
    from jaxbert.train import mlm
    from jaxbert.train import recipe as recipe_lib

    out = {}
    runs = {}
    for mode, folder in folders.items():
        recipe = recipe_lib.load("tiny-demo", [f"data.seq_len={seq_len}", f"train.per_device_batch_size={batch}",
                                               f"data.packing={mode}", "data.source=prepared"])
        loader = MLMLoader(folder, batch, seq_len, seed=0, mask_rate=recipe.data.mask_rate,
                           max_predictions=recipe.data.masked_slots())
        cfg = recipe.model_config(loader.meta["vocab_size"])
        model = build_model(recipe.model.model_class, cfg, recipe.model.options())
        runner = parallel.make_runner(recipe.parallel)
        tx, schedule = make_optimizer(recipe.optim, recipe.train.steps)
        dummy = jnp.zeros((1, seq_len), jnp.int32)
        runner.prepare(model, lambda: model.init_boxed(jax.random.PRNGKey(0), dummy, dummy)["params"], tx,
                       schedule, recipe.train.norm_metrics)
        step = runner.compile_train(mlm.train_step)
        # the batches of every repeat, on the device before timing: the step alone is timed
        host = [loader.batch_at(i) for i in range(steps)]
        useful = sum(int(b["attention_mask"].sum()) for b in host)
        batches = [runner.shard_batch({k: v[None] for k, v in b.items()}) for b in host]
        state = runner.create_state()
        key = jax.random.PRNGKey(1)
        state, m = step(state, batches[0], key)  # compile and warm up
        jax.block_until_ready(m)
        runs[mode] = {"step": step, "state": state, "batches": batches, "useful": useful, "key": key, "rates": []}
    for _ in range(repeats):
        for mode, r in runs.items():
            t = time.perf_counter()
            for b in r["batches"]:
                r["state"], m = r["step"](r["state"], b, r["key"])
            jax.block_until_ready(m)
            dt = time.perf_counter() - t
            r["rates"].append((r["useful"] / dt, len(r["batches"]) * batch * seq_len / dt))
    for mode, r in runs.items():
        out[mode] = {"useful_tokens_s": statistics.median(u for u, _ in r["rates"]),
                     "all_tokens_s": statistics.median(a for _, a in r["rates"]),
                     "useful_share": r["useful"] / (len(r["batches"]) * batch * seq_len)}
    return out


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir", default=None, help="keep the tokenizer and prepared data here")
    args = ap.parse_args()
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer

    root = Path(args.workdir or tempfile.mkdtemp(prefix="packing-figures-"))
    root.mkdir(parents=True, exist_ok=True)
    tok = root / "tokenizer"
    if not (tok / "tokenizer.json").exists():
        train_tokenizer(None, 4096, tok)
    corpora = {"embedded": None, "short": [str(root / "short.jsonl")]}
    n_short = short_corpus(root / "short.jsonl")
    figures, folders = {}, {}
    for name, inputs in corpora.items():
        for mode in MODES:
            folder = root / f"{name}-{mode}-{args.seq_len}"
            if not (folder / "metadata.json").exists():
                prepare(inputs, str(tok), str(folder), max_length=args.seq_len, validation_fraction=0.02,
                        progress=False, packing=mode, overwrite=True)
            figures[(name, mode)] = padding_share(folder)
            folders[(name, mode)] = folder
    timing = {name: time_steps({m: folders[(name, m)] for m in MODES}, args.seq_len, args.batch, args.steps,
                               args.repeats) for name in corpora}

    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); T={args.seq_len}, batch {args.batch}, "
          f"{args.steps} steps x {args.repeats} repeats; short corpus: {n_short} paragraphs of 3-60 words")
    print("| corpus | packing | train rows | documents | padded tokens | useful tokens/s | all tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for (name, mode), f in figures.items():
        t = timing[name][mode]
        print(f"| {name} | {mode} | {f['rows']:,} | {f['documents']:,} | {100 * f['padded']:.1f}% | "
              f"{t['useful_tokens_s']:,.0f} | {t['all_tokens_s']:,.0f} |")
    print(json.dumps({"cpu": cpu_model(), "padding": {f"{n}/{m}": f for (n, m), f in figures.items()},
                      "timing": timing}))


if __name__ == "__main__":
    main()
