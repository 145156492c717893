"""What `jaxbert train` shows while it runs: a bar on a terminal, compact lines everywhere.

The expected duration is printed once the first steps after compilation have
been timed (a second or two of training), then every log line carries the
steps/s and the time left, evaluations included. The full metrics go to
metrics.jsonl and TensorBoard; the console gets one short line per log step.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from jaxbert.terminal import is_terminal


def duration(seconds: float) -> str:
    m, s = divmod(int(round(max(seconds, 0))), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


class Progress:
    """Counts steps; prints the estimate, the log lines and the evaluation lines through `log`."""

    MEASURE_STEPS, MEASURE_S = 20, 5.0  # time at least this many steps and seconds before estimating
    SETTLE_STEPS = 3  # steps after the first (compilation) left out of the timing: they run slower

    def __init__(self, name: str, total: int, start: int, eval_every: int, eval_batches: int, log,
                 active: bool = True, work=None):
        """eval_batches: batches per evaluation, costed at one training step each until one was timed.
        work(first, last): the work of steps first..last (1-based, inclusive) in any unit, for runs whose
        steps differ in cost (a batch-size warmup's: its micro-batches); None: every step alike."""
        self.total, self.start, self.eval_every, self.log = total, start, eval_every, log
        self.work = work or (lambda first, last: max(last - first + 1, 0))
        self.eval_batches, self.last = eval_batches, start
        # the bar's rate: a long average (tqdm's default follows the last half second, and swings)
        self.bar = tqdm(total=total, initial=start, disable=not (active and is_terminal(sys.stderr)),
                        dynamic_ncols=True, mininterval=0.5, smoothing=0.02, desc=name, unit="step",
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}, "
                                   "{rate_fmt}{postfix}]")  # the time left is the log lines' (evaluations included)
        self.t_first = None  # the end of the first step (compilation included), where timing starts
        self.n_first = start
        self.train_s = 0.0  # training time since t_first, evaluations left out
        self.eval_s, self.evals = 0.0, 0
        self.estimated = False
        self._mark = None

    def step(self, step: int) -> None:
        now = time.time()
        self.bar.update(1)
        self.last = step
        if self.t_first is None:
            self.t_first, self._settled = now, step + self.SETTLE_STEPS
        if step <= self._settled and (step < self.total or self._mark is None):
            self._mark, self.n_first = now, step  # timing starts once the first steps have settled
            return
        self.train_s += now - self._mark
        self._mark = now
        n = step - self.n_first
        if not self.estimated and n >= self.MEASURE_STEPS and self.train_s >= self.MEASURE_S:
            self.estimated = True
            self.log(f"timed {n} steps at {n / self.train_s:.1f} steps/s: the remaining {self.total - step} "
                     f"steps take about {duration(self.eta(step))}, evaluations included")

    def steps_per_s(self) -> float | None:
        return (self.last - self.n_first) / self.train_s if self.train_s > 0 else None

    def eta(self, step: int) -> float:
        sps = self.steps_per_s() or 0.0
        timed = self.work(self.n_first + 1, self.last)
        per_s = timed / self.train_s if self.train_s > 0 and timed else 0.0  # work per second
        left = self.work(step + 1, self.total) / per_s if per_s else 0.0
        if self.eval_every:
            evals_left = self.total // self.eval_every - step // self.eval_every + (self.total % self.eval_every > 0)
            per_eval = self.eval_s / self.evals if self.evals else self.eval_batches / max(sps, 1e-9)
            left += evals_left * per_eval
        return left

    def log_step(self, step: int, scalars: dict) -> None:
        """One line: step, loss, accuracy, learning rate, speed, time left (and a mixture's epochs per source)."""
        sps = self.steps_per_s()
        extra = f" nsp_acc {scalars['nsp_accuracy']:.3f}" if "nsp_accuracy" in scalars else ""
        speed = f" | {sps:.1f} steps/s, {duration(self.eta(step))} left" if sps else ""
        if "tokens_per_s" in scalars:
            speed += f", {scalars['tokens_per_s']:,.0f} tokens/s"
        if "mfu" in scalars:
            speed += f", MFU {scalars['mfu']:.1%}"
        passes = [f"{key[len('epochs/'):]} {value:.2f}" for key, value in scalars.items() if key.startswith("epochs/")]
        if passes:  # a mixture: how far each source is through its rows
            speed += f" | epochs {', '.join(passes)}"
        self.bar.set_postfix_str(f"loss {scalars['loss']:.3f} acc {scalars['mlm_accuracy']:.3f}", refresh=True)
        self.log(f"step {step}/{self.total}: loss {scalars['loss']:.3f} acc {scalars['mlm_accuracy']:.3f}{extra} "
                 f"lr {scalars['learning_rate']:.2e}{speed}")

    def evaluated(self, step: int, seconds: float, metrics: dict) -> None:
        self.eval_s, self.evals = self.eval_s + seconds, self.evals + 1
        self._mark = time.time()  # evaluation time is not training time
        shown = f"loss {metrics['eval_mlm_loss']:.4f} acc {metrics['eval_mlm_accuracy']:.4f}"
        if "eval_nsp_accuracy" in metrics:
            shown += f" nsp_loss {metrics['eval_nsp_loss']:.4f} nsp_acc {metrics['eval_nsp_accuracy']:.4f}"
        self.log(f"step {step}/{self.total}: held-out MLM {shown} ({seconds:.1f} s)")

    def close(self) -> None:
        self.bar.close()
