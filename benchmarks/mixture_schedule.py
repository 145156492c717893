"""What a mixture costs the loader: its schedule at any stream position, and a batch beside one folder's.

1. jaxbert.data.mixture.Schedule.locate for one global batch (--batch rows) at a position early in the
   stream and one 2e9 rows in (2T tokens at T=1024), for 2, 16 and 1,833 sources (mmBERT's language
   count) weighted by temperature 0.3 over random sizes of 1e3..1e9 rows: on a fresh schedule (what a
   resume pays; median of --repeats) and per batch over the 64 batches after it (what a step pays).
2. MLMLoader.batch_at_position on a resume (a fresh loader) for one prepared folder and for a 3:1
   mixture of two (tests/helpers/mixture.py's corpora, T=16), at the same positions.

Times are this process's CPU time (time.process_time), not wall time: on a shared, loaded machine
they hold steadier; the loader reads a small local folder that stays in the page cache.

    python benchmarks/mixture_schedule.py [--batch 4608] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jaxbert.data.loader import MLMLoader  # noqa: E402
from jaxbert.data.mixture import Schedule, shares, temperature_weights  # noqa: E402
from tests.helpers.mixture import prepare_sources  # noqa: E402


def _ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4608)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| sources | position | resume: first batch, ms | per batch after it, ms |\n|---|---|---|---|")
    for n in (2, 16, 1833):
        w = shares(temperature_weights((10 ** rng.uniform(3, 9, n)).astype(np.int64), 0.3))
        for position in (10**6, 2 * 10**9):
            cold = _ms(lambda: Schedule(w, seed=0).locate(position, a.batch), a.repeats)
            warm = Schedule(w, seed=0)
            warm.locate(position, a.batch)
            t = time.process_time()
            for k in range(1, 65):  # 64 batches: block boundaries included in their share
                warm.locate(position + k * a.batch, a.batch)
            nxt = (time.process_time() - t) / 64 * 1e3
            print(f"| {n:,} | {position:.0e} | {cold:.2f} | {nxt:.2f} |")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare_sources(root, {"early": 400, "late": 150})
        batch = min(a.batch, 256)
        print(f"\n| loader ({batch} rows) | resume at 1e6: first batch, ms |\n|---|---|")
        MLMLoader(root / "early", batch, 16).batch_at_position(0)  # imports and caches warmed
        for label, dirs, kw in (("one folder", root / "early", {}),
                                ("mixture 3:1 of two", [root / "early", root / "late"], {"weights": [3, 1]})):
            ms = _ms(lambda: MLMLoader(dirs, batch, 16, **kw).batch_at_position(10**6), a.repeats)
            print(f"| {label} | {ms:.2f} |")


if __name__ == "__main__":
    main()
