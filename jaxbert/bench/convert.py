"""Conversion time and peak RSS, each load in a fresh interpreter so that peaks do not mix."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

# The child prints its RSS after imports (the baseline) and its peak after loading.
_CHILD = r"""
import json, resource, sys, time
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
which, path = sys.argv[1], sys.argv[2]
if which == "jaxbert":
    import jax, jaxbert
    load = lambda: jaxbert.from_pretrained(path)
else:
    import torch, transformers
    load = lambda: transformers.BertForMaskedLM.from_pretrained(path)
base = rss_mb()
t0 = time.perf_counter()
out = load()
if which == "jaxbert":
    jax.block_until_ready(out[1])
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "base_mb": base, "peak_mb": peak}))
"""


def write_checkpoint(directory: Path, preset_name: str = "bert-base-uncased") -> Path:
    """A random bert-base BertForMaskedLM saved by transformers as model.safetensors."""
    import torch
    import transformers

    from ..config import preset
    cfg = preset(preset_name)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**cfg.to_dict()))
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def measure(which: str, path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, which, str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{which} failed to load {path}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_convert_bench(repeats: int = 3, directory: Path | None = None) -> dict[str, list[dict]]:
    """{contender: [one dict per repeat]} for jaxbert.from_pretrained and transformers' from_pretrained."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_checkpoint(Path(directory or tmp) / "bert-base")
        size_mb = (path / "model.safetensors").stat().st_size / 2**20
        runs = {"jaxbert": [], "torch-eager": []}
        for _ in range(repeats):  # interleaved
            for which in runs:
                result = measure(which, path)
                result["checkpoint_mb"] = size_mb
                runs[which].append(result)
    return runs
