"""Benchmark records: one figure each, and the markdown table with jaxbert/peer ratios."""

from __future__ import annotations

import dataclasses
import statistics

from jaxbert.errors import InputError


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

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in ("work", "contender", "median", "min", "max", "unit")}
        out.update(self.extra)
        return out


def rate_record(work: str, contender: str, seconds: list[float], amount: float, unit: str, **extra) -> Record:
    """amount / time, e.g. tokens per second; min/max come from the slowest/fastest run."""
    rates = [amount / s for s in seconds]
    return Record(work, contender, statistics.median(rates), min(rates), max(rates), unit, extra)


def time_record(work: str, contender: str, seconds: list[float], **extra) -> Record:
    return Record(work, contender, statistics.median(seconds), min(seconds), max(seconds), "s", extra)


def markdown_table(records: list[Record], reference: str = "jaxbert") -> str:
    """One row per (work, contender); peers get the jaxbert/peer ratio of medians.

    For rates (unit ending in /s) a ratio above 1 means jaxbert is faster; for
    times (unit s) the ratio is peer time / jaxbert time, so above 1 is better too.
    """
    ours = {r.work: r for r in records if r.contender == reference}
    lines = ["| work | contender | median | min | max | unit | jaxbert/peer | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        ratio = ""
        mine = ours.get(r.work)
        if mine is not None and r.contender != reference and r.median > 0:
            ratio = f"{mine.median / r.median:.2f}x" if r.unit != "s" else f"{r.median / mine.median:.2f}x"
        notes = ", ".join(f"{k}={_fmt(v)}" for k, v in r.extra.items())
        lines.append(f"| {r.work} | {r.contender} | {_fmt(r.median)} | {_fmt(r.min)} | {_fmt(r.max)} "
                     f"| {r.unit} | {ratio} | {notes} |")
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
