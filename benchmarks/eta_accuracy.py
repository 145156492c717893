"""How close `jaxbert train`'s printed time estimate comes to the time the run then takes (#50.25).

Runs `jaxbert train ARGS` in this process, recording when each step ends and when each evaluation
ends (jaxbert.engine.progress.Progress.step / evaluated), and the estimate line the run prints. Then:
  - the estimate printed now (timing after the first steps settle, at least 20 steps and 5 s; a batch-size
    warmup's steps costed by their compiled micro-batches), against the time from that step to the end of
    the last step's evaluation;
  - the rule before (timing from the first step, at least 20 steps and 2 s, every step alike), replayed on
    the same step times, against the time from its step to the end.

    python benchmarks/eta_accuracy.py -- --config tiny-demo --workdir /tmp/demo
    python benchmarks/eta_accuracy.py -- --config modernbert-tiny-phase1 --workdir /tmp/mb1

The figures are this machine's, under whatever else it runs: a loaded machine moves both.
"""

from __future__ import annotations

import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jaxbert.engine import progress as progress_lib  # noqa: E402


def main() -> None:
    args = sys.argv[1:]
    args = args[1:] if args[:1] == ["--"] else args
    steps, evals, printed = {}, [], []
    step, evaluated = progress_lib.Progress.step, progress_lib.Progress.evaluated

    def on_step(self, n):
        step(self, n)
        steps[n] = time.time()
        if not printed and self.estimated:
            printed.append((n, self.eta(n), self.total, self.eval_every, self.eval_batches))

    def on_eval(self, n, seconds, metrics):
        evaluated(self, n, seconds, metrics)
        evals.append((n, time.time(), seconds))
    progress_lib.Progress.step, progress_lib.Progress.evaluated = on_step, on_eval
    from jaxbert.cli.main import main as jaxbert
    assert jaxbert(["train", *args]) == 0
    end = max([steps[max(steps)]] + [t for _, t, _ in evals])
    n, eta, total, every, eval_batches = printed[0]
    print(f"\nnow:    estimate at step {n}: {eta:7.1f} s; took {end - steps[n]:7.1f} s "
          f"({eta / (end - steps[n]) - 1:+.1%})")
    # the rule before, replayed: timing from the first step, >= 20 steps and >= 2 s, evaluations left out
    first = min(steps)
    eval_s = {k: s for k, _, s in evals}
    train_s, k = 0.0, None
    for s in range(first + 1, max(steps) + 1):
        train_s += steps[s] - steps[s - 1] - eval_s.get(s - 1, 0.0)
        if s - first >= 20 and train_s >= 2.0:
            k = s
            break
    sps = (k - first) / train_s
    left = (total - k) / sps
    if every:
        left += (total // every - k // every + (total % every > 0)) * eval_batches / sps
    print(f"before: estimate at step {k}: {left:7.1f} s; took {end - steps[k]:7.1f} s "
          f"({left / (end - steps[k]) - 1:+.1%})")


if __name__ == "__main__":
    main()
