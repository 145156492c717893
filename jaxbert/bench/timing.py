"""Benchmark records: one figure each, the round scheduler, per-round ratios, and the markdown table.

The contenders of a work take turns: round 1 jaxbert then each peer, round 2 the same, ... each
contender in its own warm process (round_schedule). Each round gives one time per contender, and
the jaxbert/peer ratio of a work is the median of the per-round ratios (round_ratio), with their
min-max and interquartile range beside it: load that comes and goes on a shared machine hits
both sides of a round alike, so the ratio holds where each side's own median moves.

Too noisy to judge: a ratio whose interquartile range is wider than NOISY_SPREAD (10%) of its
median, or one from fewer than MIN_ROUNDS (3) rounds; the table says so beside the ratio.
"""

from __future__ import annotations

import dataclasses
import statistics

from jaxbert.errors import InputError


NOISY_SPREAD = 0.10  # interquartile range of the per-round ratios over their median, above which: noisy
MIN_ROUNDS = 3  # fewer rounds than this: no spread to judge by


def round_schedule(contenders: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, contender) in the order they run: round 0 every contender in the stated order, then round 1, ..."""
    return [(r, name) for r in range(rounds) for name in contenders]


@dataclasses.dataclass
class Ratio:
    """jaxbert/peer over rounds: the median of the per-round ratios, their min, max and quartiles."""

    median: float
    min: float
    max: float
    q1: float
    q3: float
    rounds: int

    @property
    def spread(self) -> float:
        """Interquartile range over the median: 0.1 = the middle half of the rounds lies within 10%."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else float("inf")

    @property
    def verdict(self) -> str:
        """"ok", "noisy" (spread above NOISY_SPREAD) or "too few rounds" (below MIN_ROUNDS)."""
        if self.rounds < MIN_ROUNDS:
            return "too few rounds"
        return "noisy" if self.spread > NOISY_SPREAD else "ok"

    def to_json(self) -> dict:
        return {"ratio": self.median, "ratio_min": self.min, "ratio_max": self.max, "ratio_q1": self.q1,
                "ratio_q3": self.q3, "ratio_spread": round(self.spread, 4), "rounds": self.rounds,
                "verdict": self.verdict}

    def text(self) -> str:
        out = (f"{self.median:.2f}x (rounds {self.min:.2f}-{self.max:.2f}, IQR {self.q1:.2f}-{self.q3:.2f}, "
               f"n={self.rounds})")
        return out if self.verdict == "ok" else f"{out} {self.verdict.upper()}: not judged"


def round_ratio(ours: list[float], peer: list[float]) -> Ratio:
    """jaxbert/peer from per-round seconds per call (ours[i] and peer[i] from round i): each round's
    ratio is peer / ours (for a rate, ours / peer of amount per second: the same number), and the
    work's ratio is their median; quartiles are statistics.quantiles' inclusive ones."""
    if len(ours) != len(peer) or not ours:
        raise ValueError(f"per-round times must pair up: {len(ours)} against {len(peer)}")
    ratios = [p / o for o, p in zip(ours, peer)]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return Ratio(statistics.median(ratios), min(ratios), max(ratios), q1, q3, len(ratios))


@dataclasses.dataclass
class Record:
    """One figure: ``{"work", "contender", "median", "min", "max", "unit"}`` plus extras."""

    work: str
    contender: str
    median: float
    min: float
    max: float
    unit: str
    extra: dict = dataclasses.field(default_factory=dict)
    ratio: Ratio | None = None  # a peer's jaxbert/peer over rounds (None: jaxbert's own row, or no rounds)

    def to_json(self, machine: str | None = None) -> dict:
        out = {k: getattr(self, k) for k in ("work", "contender", "median", "min", "max", "unit")}
        out.update(self.extra)
        if self.ratio is not None:
            out.update(self.ratio.to_json())
        if machine is not None:
            out["machine"] = machine
        return out


def rate_record(work: str, contender: str, seconds: list[float], amount: float, unit: str, **extra) -> Record:
    """amount / time, e.g. tokens per second; min/max come from the slowest/fastest run."""
    rates = [amount / s for s in seconds]
    return Record(work, contender, statistics.median(rates), min(rates), max(rates), unit, extra)


def time_record(work: str, contender: str, seconds: list[float], **extra) -> Record:
    return Record(work, contender, statistics.median(seconds), min(seconds), max(seconds), "s", extra)


def markdown_table(records: list[Record], reference: str = "jaxbert", machine: str | None = None) -> str:
    """One row per (work, contender); peers get the jaxbert/peer ratio.

    A peer timed in rounds shows the median of its per-round ratios with their min-max and IQR
    (Ratio.text); otherwise the ratio of medians. For rates (unit ending in /s) a ratio above 1
    means jaxbert is faster; for times (unit s) the ratio is peer time / jaxbert time, so above 1
    is better too. machine: a last column naming the machine on every row.
    """
    ours = {r.work: r for r in records if r.contender == reference}
    head = "| work | contender | median | min | max | unit | jaxbert/peer | notes |"
    rule = "|---|---|---|---|---|---|---|---|"
    if machine is not None:
        head, rule = head + " machine |", rule + "---|"
    lines = [head, rule]
    for r in records:
        ratio = ""
        mine = ours.get(r.work)
        if r.ratio is not None:
            ratio = r.ratio.text()
        elif mine is not None and r.contender != reference and r.median > 0:
            ratio = f"{mine.median / r.median:.2f}x" if r.unit != "s" else f"{r.median / mine.median:.2f}x"
        notes = ", ".join(f"{k}={_fmt(v)}" for k, v in r.extra.items())
        lines.append(f"| {r.work} | {r.contender} | {_fmt(r.median)} | {_fmt(r.min)} | {_fmt(r.max)} "
                     f"| {r.unit} | {ratio} | {notes} |" + ("" if machine is None else f" {machine} |"))
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def check_only(only, names) -> None:
    """Each --only prefix starts at least one of names, or an InputError lists them."""
    for prefix in only or ():
        if not any(name.startswith(prefix) for name in names):
            raise InputError(f"--only {prefix}: no work's name starts with it; the works: {', '.join(names)}")
