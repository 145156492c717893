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
import subprocess
import sys
import tempfile
from pathlib import Path

CONTENDERS = {
    "jaxbert.from_pretrained": """
import jax, jaxbert
{measure_start}
module, params = jaxbert.from_pretrained(PATH)
jax.block_until_ready(params)
""",
    "jaxbert convert --to jaxbert": """
import jaxbert.convert
{measure_start}
jaxbert.convert.convert(PATH, OUT, "jaxbert")
""",
    "jaxbert convert --to hf (re-shard at 100MB)": """
import jaxbert.convert
{measure_start}
jaxbert.convert.convert(PATH, OUT, "hf", max_shard_size="100MB")
""",
    "transformers {arch} (torch)": """
import torch, transformers
transformers.logging.set_verbosity_error()
{measure_start}
model = getattr(transformers, ARCH).from_pretrained(PATH)
""",
    "transformers 4.57 Flax{arch} (from_pt)": """
import jax, torch, transformers
transformers.logging.set_verbosity_error()
{measure_start}
model = getattr(transformers, "Flax" + ARCH).from_pretrained(PATH, from_pt=True)
jax.block_until_ready(model.params)
""",
}

_CHILD = """
import json, resource, sys, time
PATH, OUT, ARCH = sys.argv[1], sys.argv[2], sys.argv[3]
def rss_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
{body}
seconds = time.perf_counter() - t0
print(json.dumps({{"seconds": seconds, "base_mb": base, "peak_mb": rss_mb("VmHWM:")}}))
"""
_MEASURE_START = """
base = rss_mb("VmRSS:")
try:
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak to the current RSS
except OSError:
    pass
t0 = time.perf_counter()
"""


def write_checkpoint(directory: Path, preset: str) -> int:
    """A random BertForMaskedLM of ``preset`` as model.safetensors; returns its size in bytes."""
    import numpy as np
    from jaxbert import preset as get_preset
    from jaxbert.convert.safetensors_io import write_safetensors
    from jaxbert.convert.table import Table
    from jaxbert.convert.writers import hf_config

    config = get_preset(preset)
    table = Table(config, "BertForMaskedLM")
    specs = [(e.key, e.torch_shape, np.float32) for e in table.entries]
    rng = np.random.default_rng(0)
    tensors = ((k, (0.02 * rng.standard_normal(s)).astype(np.float32)) for k, s, _ in specs)
    directory.mkdir(parents=True, exist_ok=True)
    size = write_safetensors(directory / "model.safetensors", specs, tensors)
    (directory / "config.json").write_text(json.dumps(hf_config(config, "BertForMaskedLM", "float32")))
    return size


def run_contender(name: str, ckpt: Path, out: Path, arch: str) -> dict:
    body = CONTENDERS[name].format(measure_start=_MEASURE_START)
    code = _CHILD.format(body=body)
    proc = subprocess.run([sys.executable, "-c", code, str(ckpt), str(out), arch], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
        for name in names:
            runs = [run_contender(name, ckpt, Path(tmp) / f"out{i}", arch) for i in range(args.repeat)]
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
