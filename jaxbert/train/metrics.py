"""Metric sinks for a training workdir: metrics.jsonl and TensorBoard event files.

``MetricsWriter`` appends one JSON object per line to WORKDIR/metrics.jsonl and
writes the same scalars as TensorBoard event files under WORKDIR/tensorboard
(with tensorboardX: neither TensorFlow nor tensorboard is a dependency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# tensorboardX imports torch whenever it is installed, only to accept torch tensors. jaxbert logs
# Python floats, and a JAX training process has no use for torch's import time and thread pools,
# so torch is hidden while tensorboardX loads (unless something already imported it).
_HIDE_TORCH = "torch" not in sys.modules
if _HIDE_TORCH:
    sys.modules["torch"] = None  # `import torch` raises ImportError meanwhile
try:
    from tensorboardX import SummaryWriter
finally:
    if _HIDE_TORCH:
        del sys.modules["torch"]


class MetricsWriter:
    """Only the primary process writes; the others pass active=False."""

    def __init__(self, workdir: str | Path, active: bool = True):
        self.active = active
        if not active:
            return
        workdir = Path(workdir)
        self._jsonl = open(workdir / "metrics.jsonl", "a", buffering=1)
        self._events = SummaryWriter(str(workdir / "tensorboard"), flush_secs=30)

    def write(self, step: int, scalars: dict) -> None:
        if not self.active:
            return
        self._jsonl.write(json.dumps({"step": step, **scalars}) + "\n")
        for key, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._events.add_scalar(key, value, step)
        self._events.flush()

    def close(self) -> None:
        if self.active:
            self._jsonl.close()
            self._events.close()


def read_metrics(workdir: str | Path) -> list[dict]:
    path = Path(workdir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {workdir} a training workdir?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
