"""The metrics log of a training workdir: metrics.jsonl and TensorBoard event files.

(Scores of fine-tuned models, accuracy or F1, are jaxbert.finetune.metrics'.) ``MetricsWriter`` appends one JSON object per line to WORKDIR/metrics.jsonl and
writes the same scalars as TensorBoard event files under WORKDIR/tensorboard
(with tensorboardX: neither TensorFlow nor tensorboard is a dependency).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jaxbert import fs
from jaxbert.errors import Diverged
from jaxbert.workdir import METRICS, TENSORBOARD

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
    """Only the primary process writes; the others pass active=False.

    resume_from: the step a run resumes from. Rows past it were written by a run that stopped
    before its next checkpoint (kill -9): the resumed run replays those steps, so they are dropped
    and metrics.jsonl keeps one record per step.
    """

    def __init__(self, workdir: str | Path, active: bool = True, upload_every_s: float = 30.0,
                 resume_from: int | None = None):
        self.active = active
        if not active:
            return
        if resume_from is not None:
            _drop_rows_after(fs.as_path(workdir) / METRICS, resume_from)
        self._remote = None
        if fs.is_url(workdir):  # a bucket cannot append: write locally, upload whole files now and then
            self._remote = (fs.as_path(workdir), None, upload_every_s)
            self._uploaded = time.time()
            self._local = Path(tempfile.mkdtemp(prefix="jaxbert-metrics-"))
            old = fs.as_path(workdir) / METRICS
            if old.exists():
                (self._local / METRICS).write_bytes(old.read_bytes())
            workdir = self._local
        workdir = Path(workdir)
        self._jsonl = open(workdir / METRICS, "a", buffering=1)
        self._events = SummaryWriter(str(workdir / TENSORBOARD), flush_secs=30)

    def write(self, step: int, scalars: dict) -> None:
        if not self.active:
            return
        self._jsonl.write(json.dumps({"step": step, **scalars}) + "\n")
        for key, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._events.add_scalar(key, value, step)
        self._events.flush()
        if self._remote is not None and time.time() - self._uploaded >= self._remote[2]:
            self.flush()

    def flush(self) -> None:
        """Make what was written so far visible in a URL workdir (a checkpoint save calls it)."""
        if not self.active or self._remote is None:
            return
        self._jsonl.flush()
        self._events.flush()
        root = self._remote[0]
        fs.atomic_write_bytes(root / METRICS, (self._local / METRICS).read_bytes())
        for events in (self._local / TENSORBOARD).iterdir():  # tensorboardX's own event file(s)
            fs.atomic_write_bytes(root / TENSORBOARD / events.name, events.read_bytes())
        self._uploaded = time.time()

    def close(self) -> None:
        if self.active:
            self.flush()
            self._jsonl.close()
            self._events.close()
            if self._remote is not None:
                shutil.rmtree(self._local, ignore_errors=True)


def _drop_rows_after(path, step: int) -> None:
    """Rewrites metrics.jsonl (atomically) without the rows of steps after `step`, if it has any."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)

    def later(line: str) -> bool:
        try:
            return json.loads(line).get("step", 0) > step
        except (ValueError, AttributeError):
            return True  # the torn last row of a killed run (the file is the run's own)
    kept = [line for line in lines if not later(line)]
    if len(kept) != len(lines):
        fs.atomic_write_text(path, "".join(kept))


def read_metrics(workdir: str | Path) -> list[dict]:
    path = fs.as_path(workdir) / METRICS
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {workdir} a training workdir?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# Per-step values a window reports as of its last step rather than summed.
LATEST = ("grad_norm", "update_norm", "param_norm", "learning_rate")


class MetricWindow:
    """Metric sums over the steps since the last log line; ``summarize`` (the task's) turns them
    into figures. carried: a checkpoint's ``carry()``, the sums of the steps it saved after its last log
    row, so that a resumed run's next row covers them as an uninterrupted run's does."""

    def __init__(self, summarize, carried: dict | None = None):
        self.summarize = summarize
        self.sums, self.n, self.t = {}, 0, None
        if carried:
            self.sums = {k: (dict(v) if isinstance(v, dict) else v) for k, v in carried["sums"].items()}
            self.n = int(carried["n"])

    def carry(self) -> dict | None:
        """The sums not yet flushed, as JSON for a checkpoint's meta; None when the window is empty."""
        if not self.n:
            return None
        return {"sums": {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.sums.items()}, "n": self.n}

    def add(self, step: int, m: dict):
        """m: one step's metric sums on the host; raises Diverged if they are not finite."""
        if not m.pop("finite"):
            raise Diverged(f"the loss or a gradient is NaN/Inf at step {step}; stopped without saving "
                           f"it (metrics: {self.summarize(m)})")
        for key in LATEST:
            if key in m:  # update_norm / param_norm only with train.norm_metrics
                self.sums.setdefault("_last", {})[key] = m.pop(key)
        for k, v in m.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.n += 1

    def flush(self, throughput=None, devices: int = 1) -> dict:
        """The window's figures, steps_per_s among them once a window was timed; throughput
        (tokens per step, sequence length, FLOPs per token, peak FLOP/s or None) adds tokens/s,
        sequences/s, GFLOP/s and MFU."""
        now = time.time()
        last = self.sums.pop("_last", {})
        out = self.summarize({**self.sums, **last})
        if self.t is not None and self.n:
            out["steps_per_s"] = self.n / (now - self.t)
            if throughput is not None:
                tokens_per_step, seq_len, flops_per_token, peak = throughput
                tps = tokens_per_step * out["steps_per_s"]
                out.update(tokens_per_s=tps, sequences_per_s=tps / seq_len,
                           gflops_per_s=tps * flops_per_token / 1e9)
                if peak:
                    out["mfu"] = tps * flops_per_token / (peak * devices)
        self.sums, self.n, self.t = {}, 0, now
        return out
