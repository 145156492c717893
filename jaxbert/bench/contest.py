"""The contenders' worker processes and their turns: a spec run once in a fresh interpreter (``run_worker``),
a warm ``worker --serve`` process timed round by round (``WarmWorker``), rounds over the warm workers in
timing.round_schedule's order (``alternate``), and each peer's ratio to jaxbert from the rounds both
completed (``ratios_for``). jaxbert.bench.harness schedules the works on them.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

from jaxbert.bench.timing import round_ratio, round_schedule
from jaxbert.bench.worker import REPLY_PREFIX


def run_worker(spec: dict, env: dict | None = None) -> dict | None:
    """Run one spec in a fresh interpreter; None (and the reason printed) if it failed."""
    proc = subprocess.run([sys.executable, "-m", "jaxbert.bench.worker", json.dumps(spec)],
                          capture_output=True, text=True, env=env or None)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  {spec['work']} {spec['contender']}: skipped ({tail})", flush=True)
        return None
    return json.loads(lines[-1])


class WorkerFailed(RuntimeError):
    pass


class WarmWorker:
    """One contender's `worker --serve` process: built and warmed up once, then timed round by round."""

    def __init__(self, spec: dict, env: dict | None = None):
        self.name = f"{spec['work']} {spec['contender']}"
        self.log = tempfile.TemporaryFile(mode="w+")  # stderr: read back only to say why it failed
        self.proc = subprocess.Popen([sys.executable, "-m", "jaxbert.bench.worker", "--serve", json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env or None)
        self._read()  # READY: built and warmed up

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(REPLY_PREFIX):
                return json.loads(line[len(REPLY_PREFIX):])
        self.proc.wait()
        self.log.seek(0)
        tail = (self.log.read().strip().splitlines() or ["no output"])[-1]
        raise WorkerFailed(tail)

    def _ask(self, line: str) -> dict:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # _read says why
        return self._read()

    def time(self, calls: int) -> list[float]:
        return self._ask(f"time {calls}")["seconds"]

    def finish(self) -> dict:
        extra = self._ask("finish")["extra"]
        self.proc.wait()
        return extra

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def start_worker(spec: dict, env: dict | None = None) -> WarmWorker:
    return WarmWorker(spec, env)


def alternate(workers: dict, rounds: int, calls: int = 1, say=print) -> dict[str, dict]:
    """Rounds over warm workers ({contender: worker}, in the stated order): each round every worker
    times `calls` calls in turn. {contender: {"seconds": every call, "per_round": each round's median
    call, "extra": the worker's extras}}; a worker that fails is dropped (and said so)."""
    live = dict(workers)
    seconds = {name: [] for name in workers}
    per_round = {name: [] for name in workers}
    for _, name in round_schedule(list(workers), rounds):
        if name not in live:
            continue
        try:
            secs = live[name].time(calls)
        except WorkerFailed as e:
            say(f"  {name}: dropped ({e})")
            del live[name]
            continue
        seconds[name].extend(secs)
        per_round[name].append(statistics.median(secs))
    out = {}
    for name, w in live.items():
        try:
            out[name] = {"seconds": seconds[name], "per_round": per_round[name], "extra": w.finish()}
        except WorkerFailed as e:
            say(f"  {name}: dropped ({e})")
    return out


def ratios_for(results: dict[str, dict], reference: str = "jaxbert") -> dict:
    """{peer: Ratio} from the per-round times of the reference and each peer (rounds both completed)."""
    ours = results.get(reference)
    if ours is None:
        return {}
    out = {}
    for name, res in results.items():
        n = min(len(ours["per_round"]), len(res["per_round"]))
        if name != reference and n:
            out[name] = round_ratio(ours["per_round"][:n], res["per_round"][:n])
    return out
