"""A pretraining run's downstream tasks: fine-tune its final checkpoint on each task its recipe's
outputs.downstream names, and add the scores to its metrics.jsonl.

Lives in finetune/ (train/ may not import finetune/); `jaxbert train` checks the items with
`check_items` when the recipe loads (every task kind known, every file and folder there, every
item's recipe and `set` valid: a misspelt kind is not found after hours of pretraining) and calls
`run_downstream` after the run finishes, and again on a rerun of a finished run. Each item
fine-tunes into a folder of its own, WORKDIR/downstream/<task name> (<task name>-<n> when several
items share a kind), with its item's recipe (default: its kind's, finetune-glue, or finetune-squad for qa) and
`set` overrides; the score reported is the main metric of the evaluation at the end of fine-tuning.
A rerun reads back the items that finished and trains (or resumes) the others.
"""

from __future__ import annotations

from collections import Counter

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.errors import InputError
from jaxbert.finetune import kinds
from jaxbert.finetune.glue_run import check_folders
from jaxbert.finetune.loop import finetune
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from jaxbert.engine.metrics_log import MetricsWriter, read_metrics


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


def _recipe(item: dict, kind: kinds.Kind):
    return load(item.get("config") or kind.recipe, list(item.get("set", [])))


def folder_names(items: list) -> list[str]:
    """One folder name per item: the task's name, numbered (classification-1, classification-2) where
    several items share it, so that no item resumes or reads back another's run."""
    names = [_spec(item).name for item in items]
    counts, seen, out = Counter(names), Counter(), []
    for name in names:
        seen[name] += 1
        out.append(name if counts[name] == 1 else f"{name}-{seen[name]}")
    return out


def check_items(items: list) -> None:
    """Every item's task kind, files, recipe and tokenizer checked now (InputError naming the item
    and what is wrong), so that nothing is found wrong after pretraining."""
    for k, item in enumerate(items):
        where = f"outputs.downstream[{k}]"
        try:
            spec = _spec(item)
            if spec.glue:
                check_folders(spec.data_dir, (spec.glue,))
            else:
                for path in (spec.train, *spec.evals.values()):
                    p = fs.as_path(path)
                    if not p.exists():
                        raise InputError(f"{path}: no such file")
                    if p.is_dir():
                        raise InputError(f"{path}: a folder, not a data file")
            _recipe(item, spec.kind)
            if item.get("tokenizer") is not None and not fs.as_path(item["tokenizer"]).exists():
                raise InputError(f"tokenizer {item['tokenizer']}: no such folder")
        except InputError as e:
            raise InputError(f"{where} ({item.get('task')}): {e}") from None


def run_downstream(items: list, workdir, step: int, log=print) -> list[dict]:
    """Fine-tunes workdir's final checkpoint on each item; one result each: {"task", "eval",
    "metric", "score", "evals", "workdir"} ("task" is the item's folder name); the scores are
    written to workdir/metrics.jsonl at `step` as downstream_<task>_<eval>_<metric>, each once
    (a rerun adds only what is missing)."""
    check_items(items)
    root = fs.as_path(workdir)
    results = []
    for item, folder in zip(items, folder_names(items)):
        spec = _spec(item)
        recipe = _recipe(item, spec.kind)
        where = workdir_lib.downstream_dir(root, folder)
        log(f"outputs.downstream: fine-tuning {root} on {spec.name} into {where}")
        summary = finetune(recipe, spec, root, where, tokenizer=item.get("tokenizer"), log=log)
        if summary["status"] == "stopped":
            raise InputError(f"{where}: stopped before the end; run `jaxbert train` again to finish it")
        evals = summary["history"][-1]["evals"]
        eval_name, metric = summary["main"]
        results.append({"task": folder, "eval": eval_name, "metric": metric,
                        "score": evals[eval_name].get(metric), "evals": evals, "workdir": str(where)})
    if results:
        try:
            logged = {k for row in read_metrics(root) if row.get("step") == step for k in row}
        except FileNotFoundError:
            logged = set()
        scores = {f"downstream_{r['task']}_{n}_{k}": v for r in results for n, ms in r["evals"].items()
                  for k, v in ms.items()}
        scores = {k: v for k, v in scores.items() if k not in logged}
        if scores:
            writer = MetricsWriter(root)
            try:
                writer.write(step, scores)
            finally:
                writer.close()
    return results
