"""A pretraining run's downstream tasks: fine-tune its final checkpoint on each task its recipe's
outputs.downstream names, and add the scores to its metrics.jsonl.

Lives in finetune/ (train/ may not import finetune/); `jaxbert train` calls it after a run
finishes. Each task fine-tunes into WORKDIR/downstream/<task name> with its item's recipe
(default: its kind's, finetune-glue, or finetune-squad for qa) and `set` overrides; the score
reported is the main metric of the evaluation at the end of fine-tuning.
"""

from __future__ import annotations

from jaxbert import fs
from jaxbert.finetune import kinds
from jaxbert.finetune.loop import finetune
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task import parse_task
from jaxbert.engine.metrics import MetricsWriter


def _spec(item: dict):
    task = item["task"]
    if task.lower().startswith("glue/"):
        return parse_task(task, data_dir=item["data"])
    kwargs = {}
    if task in kinds.KINDS and kinds.KINDS[task].reads_columns:
        columns = item.get("text_columns", ["sentence"])
        kwargs = {"text_columns": tuple([columns] if isinstance(columns, str) else columns),
                  "label_column": item.get("label_column", "label")}
    if item.get("labels") is not None:
        labels = item["labels"]
        kwargs["labels"] = tuple(labels.split(",") if isinstance(labels, str) else labels)
    evals = item["eval"] if isinstance(item["eval"], list) else [item["eval"]]
    return parse_task(task, item["train"], evals, **kwargs)


def run_downstream(items: list, workdir, step: int, log=print) -> list[dict]:
    """Fine-tunes workdir's final checkpoint on each item; one result each: {"task", "eval",
    "metric", "score", "evals", "workdir"}; the scores are written to workdir/metrics.jsonl at `step`
    as downstream_<task>_<eval>_<metric>."""
    root = fs.as_path(workdir)
    results = []
    for item in items:
        spec = _spec(item)
        recipe = load(item.get("config") or kinds.get(spec.kind).recipe, list(item.get("set", [])))
        where = root / "downstream" / spec.name
        log(f"outputs.downstream: fine-tuning {root} on {spec.name} into {where}")
        summary = finetune(recipe, spec, root, where, tokenizer=item.get("tokenizer"), log=log)
        evals = summary["history"][-1]["evals"]
        eval_name, metric = summary["main"]
        results.append({"task": spec.name, "eval": eval_name, "metric": metric,
                        "score": evals[eval_name].get(metric), "evals": evals, "workdir": str(where)})
    if results:
        writer = MetricsWriter(root)
        try:
            writer.write(step, {f"downstream_{r['task']}_{n}_{k}": v for r in results
                                for n, ms in r["evals"].items() for k, v in ms.items()})
        finally:
            writer.close()
    return results
