"""Time and peak RSS of loading a bert-base-sized checkpoint: jaxbert vs transformers.

    python benchmarks/convert_bench.py                 # bert-base-uncased BertForMaskedLM, fp32
    python benchmarks/convert_bench.py --preset bert-small --repeat 3 --flax
    python benchmarks/convert_bench.py --checkpoint DIR      # an existing HF directory

A random checkpoint (model.safetensors + config.json) is written once, tensor by
tensor. Each contender then runs in its own fresh subprocess: it imports its
libraries, records its resident set size (the baseline), resets the kernel's
high-water mark (/proc/self/clear_refs), loads the checkpoint, and reports
wall time and peak RSS. "above base" = peak - baseline: the memory the load
itself took. The target for jaxbert is <= 1.5x the checkpoint size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from jaxbert.bench.convert import CONTENDERS, run_contender, write_checkpoint


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bert-base-uncased")
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender; the median is shown")
    parser.add_argument("--flax", action="store_true", help="also time transformers 4.57's Flax port")
    parser.add_argument("--workdir", default=None, help="where to write the checkpoint (default: a temp dir)")
    parser.add_argument("--checkpoint", default=None, help="use this HF directory instead of a random one")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        if args.checkpoint:
            ckpt = Path(args.checkpoint)
            arch = json.loads((ckpt / "config.json").read_text())["architectures"][0]
            size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
            print(f"checkpoint: {ckpt} ({arch}), {size / 2**20:.0f} MB")
        else:
            ckpt, arch = Path(tmp) / "ckpt", "BertForMaskedLM"
            size = write_checkpoint(ckpt, args.preset)
            print(f"checkpoint: {args.preset} BertForMaskedLM, fp32 safetensors, {size / 2**20:.0f} MB")
        size_mb = size / 2**20
        names = [n for n in CONTENDERS if args.flax or "Flax" not in n]
        print(f"{'contender':<50} {'time s':>7} {'base MB':>8} {'peak MB':>8} {'above base':>11} {'/ ckpt':>7}")
        for j, name in enumerate(names):  # a fresh destination each run: convert refuses to write over one
            runs = [run_contender(name, ckpt, Path(tmp) / f"out{j}-{i}", arch) for i in range(args.repeat)]
            ok = [r for r in runs if "error" not in r]
            label = name.format(arch=arch)
            if not ok:
                print(f"{label:<50} error: {runs[0]['error']}")
                continue
            med = {k: statistics.median(r[k] for r in ok) for k in ok[0]}
            above = med["peak_mb"] - med["base_mb"]
            print(f"{label:<50} {med['seconds']:7.2f} {med['base_mb']:8.0f} {med['peak_mb']:8.0f} "
                  f"{above:11.0f} {above / size_mb:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
