"""Conversion time and peak RSS, each contender in a fresh interpreter so that peaks do not mix.

A random checkpoint (model.safetensors + config.json) is written once, tensor by
tensor. Each contender then runs in its own subprocess: it imports its
libraries, records its resident set size (the baseline), resets the kernel's
high-water mark (/proc/self/clear_refs), loads the checkpoint, and reports wall
time and peak RSS. "above baseline" = peak - baseline: the memory the load took.
Used by `jaxbert bench` (work convert/bert-base) and benchmarks/convert_bench.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from jaxbert.convert.safetensors_io import write_safetensors
from jaxbert.model.bert.table import Table
from jaxbert.convert.writers import hf_config
from jaxbert.model.configs import preset as get_preset

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
cls = getattr(transformers, ARCH)  # transformers imports its modules lazily: not part of the load
{measure_start}
model = cls.from_pretrained(PATH)
""",
    "transformers 4.57 Flax{arch} (from_pt)": """
import jax, torch, transformers
transformers.logging.set_verbosity_error()
cls = getattr(transformers, "Flax" + ARCH)
{measure_start}
model = cls.from_pretrained(PATH, from_pt=True)
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



def run_convert_bench(repeats: int = 3, preset: str = "bert-base-uncased") -> dict[str, list[dict]]:
    """{contender: [one result per repeat]}: jaxbert.from_pretrained vs transformers' from_pretrained,
    taking turns. Each result has seconds, base_mb, peak_mb and checkpoint_mb."""
    contenders = {"jaxbert": "jaxbert.from_pretrained", "torch-eager": "transformers {arch} (torch)"}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        size_mb = write_checkpoint(ckpt, preset) / 2**20
        runs = {name: [] for name in contenders}
        for i in range(repeats):
            for name, contender in contenders.items():
                result = run_contender(contender, ckpt, Path(tmp) / f"out{i}", "BertForMaskedLM")
                if "error" in result:
                    raise RuntimeError(f"{name} failed to load {ckpt}: {result['error']}")
                runs[name].append(dict(result, checkpoint_mb=size_mb))
    return runs
