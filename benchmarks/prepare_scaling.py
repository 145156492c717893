"""`jaxbert data prepare` throughput against its number of workers, locally and on Beam's DirectRunner.

The embedded Python-docs corpus is written as --files jsonl files (a corpus as users bring it, and
the unit a Beam worker reads), then prepared at T=128 with the all-MiniLM-L6-v2 vocabulary:
  - `--runner local` with 1, 2, ... workers (up to the cores),
  - `--runner direct` (multi_processing) with 1, 2, ... workers,
medians of --repeats, alternating, each run into a fresh folder. For the Beam runs the time of the
two pipelines (measure, encode) and of the packing pass here are shown apart: the packing pass is
sequential on the launching machine whatever the runner.

From the measured rates it prints, on paper, the hours to prepare 1T tokens on a 64-core VM
(local runner, this CPU's per-core rate and the measured scaling from 1 to all cores) and on
Dataflow (per-worker-core rate of the encode pipeline, plus the sequential packing pass).

    python benchmarks/prepare_scaling.py [--files 8] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _packing_rate(chunks: int = 40, docs: int = 600) -> float:
    """Tokens/s of the packing pass (staged .npz chunk -> MLMPacker -> shard files), on synthetic
    chunks of documents of 50-2,000 ids: what the launching machine does after a Beam run."""
    import io
    from pathlib import Path

    import numpy as np

    from jaxbert.data.packing import MLMPacker
    from jaxbert.data.prepare import _ShardWriter

    rng = np.random.default_rng(0)
    staged = []
    for _ in range(chunks):
        lengths = rng.integers(50, 2000, docs)
        buf = io.BytesIO()
        np.savez(buf, tokens=rng.integers(5, 30000, int(lengths.sum())).astype(np.uint16), lengths=lengths)
        staged.append(buf.getvalue())
    total = 0
    with tempfile.TemporaryDirectory() as d:
        writer, packer = _ShardWriter(Path(d), "train", 1 << 19, False), MLMPacker(128, 2, 3, 0, np.uint16)
        t0 = time.perf_counter()
        for blob in staged:
            with np.load(io.BytesIO(blob)) as z:
                writer.add(packer.add(z["tokens"], z["lengths"]))
                total += len(z["tokens"])
        writer.add(packer.finish())
        writer.close()
        return total / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--copies", type=int, default=4, help="the corpus this many times over (more text per run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dataflow-workers", type=int, default=32)
    ap.add_argument("--dataflow-cores", type=int, default=4, help="vCPUs per Dataflow worker")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from jaxbert.data import beam as beam_mod
    from jaxbert.data.corpus import Corpus
    from jaxbert.data.prepare import prepare
    from jaxbert.finetune.demo import minilm_folder

    tok = minilm_folder()
    tmpdir = tempfile.TemporaryDirectory()
    tmp = tmpdir.name
    docs = [d for d, _ in Corpus(None)] * args.copies
    for f in range(args.files):
        with open(f"{tmp}/part-{f:03d}.jsonl", "w", encoding="utf-8") as out:
            for d in docs[f::args.files]:
                out.write(json.dumps({"text": d}) + "\n")
    mb = sum(len(d.encode()) for d in docs) / 1e6
    cores = len(os.sched_getaffinity(0))

    pipeline_time = [0.0]
    run = beam_mod.BeamEncoder._run

    def timed_run(self, build):
        t0 = time.perf_counter()
        run(self, build)
        pipeline_time[0] += time.perf_counter() - t0

    beam_mod.BeamEncoder._run = timed_run

    configs = [("local", w) for w in range(1, cores + 1)] + [("direct", w) for w in range(1, cores + 1)]
    samples = {c: [] for c in configs}
    pipes = {c: [] for c in configs}
    tokens = None
    for r in range(args.repeats):
        for runner, workers in configs:
            out = f"{tmp}/out-{runner}-{workers}-{r}"
            pipeline_time[0] = 0.0
            opts = (f"--direct_num_workers={workers} --direct_running_mode=multi_processing"
                    if runner == "direct" else None)
            t0 = time.perf_counter()
            meta = prepare([tmp + "/part-*.jsonl"], tok, out, max_length=128, num_workers=workers,
                           runner=runner, pipeline_options=opts, progress=False)
            samples[(runner, workers)].append(time.perf_counter() - t0)
            pipes[(runner, workers)].append(pipeline_time[0])
            tokens = meta["counts"]["tokens"]
    med = {c: statistics.median(s) for c, s in samples.items()}
    pipe = {c: statistics.median(s) for c, s in pipes.items()}

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"{cpu}, {cores} cores; corpus {mb:.2f} MB in {args.files} jsonl files, {tokens:,} tokens, T=128, "
          f"medians of {args.repeats}")
    print(f"{'runner':<10}{'workers':>8}{'seconds':>9}{'MB/s':>8}{'tokens/s':>11}{'pipelines s':>13}{'packing s':>11}")
    for (runner, workers), t in med.items():
        p = pipe[(runner, workers)]
        extra = f"{p:>13.1f}{t - p:>11.1f}" if runner == "direct" else f"{'':>13}{'':>11}"
        print(f"{runner:<10}{workers:>8}{t:>9.1f}{mb / t:>8.2f}{tokens / t:>11,.0f}{extra}")

    per_core = tokens / med[("local", 1)]
    scaling = med[("local", 1)] / med[("local", cores)] / cores if cores > 1 else 1.0
    vm_hours = 1e12 / (64 * per_core * scaling) / 3600
    # Dataflow: its workers run the local path's encode_chunk, so this CPU's per-core rate; then the
    # packing pass, sequential here, whose rate the small corpus hides under fixed costs: timed apart
    d = ("direct", cores)
    pack_rate = _packing_rate()
    df_cores = args.dataflow_workers * args.dataflow_cores
    encode_h, pack_h = 1e12 / (df_cores * per_core) / 3600, 1e12 / pack_rate / 3600
    print(f"per core: local {per_core:,.0f} tokens/s; scaling 1 -> {cores} workers {scaling:.2f} of linear")
    print(f"DirectRunner: {tokens / (pipe[d] * cores):,.0f} tokens/s per worker in its pipelines (start-up included); "
          f"packing pass (staged chunks -> shards, timed apart) {pack_rate:,.0f} tokens/s")
    print(f"on paper, 1T tokens on a 64-core VM (local runner, measured scaling): {vm_hours:,.0f} h")
    print(f"on paper, 1T tokens on Dataflow, {args.dataflow_workers} workers x {args.dataflow_cores} vCPUs at this "
          f"per-core rate: {encode_h:,.1f} h tokenizing + {pack_h:,.1f} h packing here = {encode_h + pack_h:,.1f} h")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "cores": cores, "mb": mb, "tokens": tokens,
                       "seconds": {f"{r}-{w}": t for (r, w), t in med.items()},
                       "pipelines": {f"{r}-{w}": t for (r, w), t in pipe.items()}}, f, indent=2)
    tmpdir.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
