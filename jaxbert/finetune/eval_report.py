"""What a fine-tuning run tells: the table of evaluations, and WORKDIR/eval.json.

An evaluation record is {"step", "epoch", "evals": {eval set: {metric: value}}}; the best one
is the record with the highest main metric (NaN counts as lowest).
"""

from __future__ import annotations

import json
import math

from jaxbert import fs
from jaxbert import workdir as workdir_lib


def main_score(record: dict, main: tuple[str, str]) -> float:
    """The record's main metric, -inf when absent or NaN (a constant prediction's correlation)."""
    value = record["evals"].get(main[0], {}).get(main[1])
    return -math.inf if value is None or not math.isfinite(value) else float(value)


def table(history: list[dict], main: tuple[str, str]) -> str:
    """One line per evaluation: step, epoch, then every eval set's metrics; the best line starred."""
    if not history:
        return "(no evaluations)"
    columns = []
    for record in history:
        for name, metrics in record["evals"].items():
            for key, value in metrics.items():
                if isinstance(value, float) and (name, key) not in columns:
                    columns.append((name, key))
    heads = ["step", "epoch"] + [f"{n}/{k}" for n, k in columns]
    widths = [max(6, len(h)) for h in heads]
    best = max(range(len(history)), key=lambda i: main_score(history[i], main))
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    for i, record in enumerate(history):
        cells = [str(record["step"]), f"{record['epoch']:.2f}"]
        cells += [_fmt(record["evals"].get(n, {}).get(k)) for n, k in columns]
        lines.append("  ".join(c.rjust(w) for c, w in zip(cells, widths)) + ("  *" if i == best else ""))
    lines.append(f"* best by {main[0]}/{main[1]}")
    return "\n".join(lines)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def write_eval_json(workdir, task: str, main: tuple[str, str], history: list[dict], best: dict | None) -> None:
    """WORKDIR/eval.json: the task, the main metric, the best evaluation and every evaluation."""
    doc = {"task": task, "main": {"eval": main[0], "metric": main[1]},
           "best": best and {"step": best["step"], "score": main_score(best, main), "evals": best["evals"]},
           "evaluations": history}
    fs.atomic_write_text(workdir_lib.path(workdir, workdir_lib.EVAL), json.dumps(doc, indent=2) + "\n")
