"""What a mixture's per-source reporting and data checks cost a run (#50.28).

A `jaxbert train` run on a 3:1 mixture of two prepared folders (tests/helpers/mixture.py's corpora, T=16),
a tiny model, --batch rows a step in 8 micro-batches (4,608 by default, ModernBERT-base's global batch: four
and a half schedule blocks of 1,024), --steps steps, logging every step. Counted while it runs:
  - schedule blocks built (jaxbert.data.mixture.Schedule._block), and how many of them were built again
    after an eviction, with the time spent building them;
  - Schedule.consumed calls (the per-source figures) and their time;
  - check_data and check_mixture calls (the mixture's folders read and compared).

    python benchmarks/mixture_reporting.py [--batch 4608] [--steps 20]

Run it on an older tree (PYTHONPATH=OLD python benchmarks/mixture_reporting.py) for the figures before.
Times are this process's CPU time (time.process_time).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import yaml  # noqa: E402

from jaxbert.data import loader as loader_lib  # noqa: E402
from jaxbert.data.mixture import Schedule  # noqa: E402
from jaxbert.train import sources  # noqa: E402
from tests.helpers.mixture import prepare_sources  # noqa: E402


def counted(owner, name: str, calls: Counter, times: Counter, key: str, miss=None):
    """Wrap owner.name: count its calls (or, with miss(self, *args), only those miss says are misses)."""
    fn = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if miss is None or miss(*args):
            calls[key] += 1
            if miss is not None:
                calls[f"{key} again"] += (id(args[0]), args[1]) in built
                built.add((id(args[0]), args[1]))
        t = time.process_time()
        out = fn(*args, **kwargs)
        times[key] += time.process_time() - t
        return out
    setattr(owner, name, wrapper)


built: set = set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4608)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    calls, times = Counter(), Counter()
    counted(Schedule, "_block", calls, times, "blocks built", miss=lambda self, b: b not in self._blocks)
    counted(Schedule, "consumed", calls, times, "consumed")
    counted(sources, "check_data", calls, times, "check_data")
    counted(sources, "check_mixture", calls, times, "check_mixture (sources)")
    counted(loader_lib, "check_mixture", calls, times, "check_mixture (loader)")
    from jaxbert.cli.main import main as jaxbert
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare_sources(root, {"early": 9000, "late": 3000}, validation_fraction=0.2)
        recipe = {"name": "mixture-reporting",
                  "model": {"preset": "bert-tiny", "config": {"hidden_size": 32, "num_hidden_layers": 1,
                                                             "num_attention_heads": 2, "intermediate_size": 64,
                                                             "max_position_embeddings": 32}},
                  "data": {"source": "prepared", "seq_len": 16, "mask_rate": 0.25,
                           "sources": [{"dir": str(root / "early"), "weight": 3},
                                       {"dir": str(root / "late"), "weight": 1}]},
                  "train": {"steps": args.steps, "per_device_batch_size": args.batch // 8, "log_every": 1,
                            "eval_every": 0, "eval_batches": 1, "accum_steps": 8},
                  "checkpoint": {"every_steps": args.steps, "keep": 1}, "outputs": {"plot": False}}
        (root / "r.yaml").write_text(yaml.safe_dump(recipe))
        t = time.time()
        assert jaxbert(["train", "--config", str(root / "r.yaml"), "--workdir", str(root / "wd")]) == 0
        wall = time.time() - t
    rows = args.steps * args.batch
    print(f"\n{args.steps} steps x {args.batch} rows ({rows:,} rows, {-(-rows // 1024)} blocks of 1,024 read), "
          f"run {wall:.1f} s wall")
    for key in ("blocks built", "blocks built again", "consumed", "check_data", "check_mixture (sources)",
                "check_mixture (loader)"):
        extra = f", {times[key] * 1e3:8.1f} ms CPU" if key in times else ""
        print(f"  {key:26s} {calls[key]:6d}{extra}")


if __name__ == "__main__":
    main()
