"""run_glue(model, GLUE_DIR): the eight GLUE tasks under one stated protocol, and their average.

The protocol: every task fine-tunes MODEL with the same recipe (by default the one `finetune` picks:
finetune-glue, batch 32, 3 epochs, peak lr 2e-5, 10% warmup, max length 128, or finetune-tiny for a
small model; `--set` changes it for every task alike),
one run per seed (seed k of n uses train.seed + k), and a task's dev score is the evaluation at
the end of training (no checkpoint picked on dev). With several seeds a task reports the run
whose main metric is the median (the lower middle one for an even count), all of that run's
metrics with it. The average is GLUE's: the mean over the tasks run of each task's main metric
(GLUE_MAIN: CoLA MCC, SST-2 accuracy, MRPC F1, QQP F1, STS-B Pearson, MNLI matched accuracy,
QNLI accuracy, RTE accuracy). WNLI is left out, as MosaicBERT and Cramming do (BERT's own
classifier never beats its majority class). Every task's folder is checked before any trains.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
from pathlib import Path
from typing import Sequence

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.finetune.glue import GLUE_TASKS, glue_task, task_folder
from jaxbert.finetune.loop import finetune, fit_max_length
from jaxbert.finetune.model import source_config
from jaxbert.finetune.recipe import FinetuneRecipe
from jaxbert.finetune.eval_report import main_score
from jaxbert.finetune.row_files import TaskDataError
from jaxbert.finetune.task_data import parse_task

GLUE_EIGHT = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte")
SEED_COUNTS = (1, 3, 5)
AVERAGE_RULE = ("mean over the tasks run of each task's main metric (CoLA mcc, SST-2 accuracy, MRPC f1, "
                "QQP f1, STS-B pearson, MNLI matched accuracy, QNLI accuracy, RTE accuracy)")


def parse_tasks(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """The tasks named (comma-separated or a list; GLUE spellings allowed) in GLUE order; None = all eight."""
    if text is None:
        return GLUE_EIGHT
    names = [n for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    wanted = set()
    for name in names:
        task = glue_task(name.strip())
        if task.name not in GLUE_EIGHT:
            raise TaskDataError(f"--tasks {name}: WNLI is left out of this protocol (as MosaicBERT and Cramming "
                                f"do); fine-tune it alone with `jaxbert finetune --task glue/wnli`")
        wanted.add(task.name)
    if not wanted:
        raise TaskDataError("--tasks names no task")
    return tuple(t for t in GLUE_EIGHT if t in wanted)


def check_folders(data, tasks: Sequence[str]) -> dict[str, Path]:
    """task -> its folder; a TaskDataError naming every task whose folder or files are missing."""
    found, missing = {}, []
    for name in tasks:
        task = GLUE_TASKS[name]
        try:
            folder = task_folder(task, data)
        except TaskDataError:
            missing.append(f"{name} ({task.folder}/{task.train})")
            continue
        absent = [f for f in (task.train, *task.evals.values()) if not (folder / f).is_file()]
        if absent:
            missing.append(f"{name} ({', '.join(f'{folder.name}/{f}' for f in absent)})")
        found[name] = folder
    if missing:
        raise TaskDataError(f"{data}: missing GLUE data for {'; '.join(missing)}; add them or leave the tasks "
                            f"out with --tasks (e.g. --tasks {','.join(t for t in tasks if t in found) or 'sst2'})")
    return found


def _final(summary: dict) -> dict:
    """The evaluation at the end of training: {eval set: {metric: value}}."""
    history = summary["history"]
    if not history:
        raise TaskDataError(f"{summary['workdir']}: the run recorded no evaluation")
    return history[-1]["evals"]


def _median_run(runs: list[dict], main: tuple[str, str]) -> dict:
    ranked = sorted(runs, key=lambda r: main_score({"evals": r["evals"]}, main))
    return ranked[(len(ranked) - 1) // 2]


def run_glue(model, data, recipe: FinetuneRecipe, tasks: Sequence[str] = GLUE_EIGHT, seeds: int = 1,
             workdir="runs/glue", tokenizer=None, log=print) -> dict:
    """Fine-tunes MODEL on each task (each seed in WORKDIR/<task>/seed-<seed>); returns the report.

    Report: {"model", "data", "protocol", "tasks": {task: {"main": [eval, metric], "score",
    "evals", "seed", "runs": [{"seed", "score", "evals", "workdir"}]}}, "average", "average_rule"}.
    A task's run that already finished in its workdir is read back, not trained again.
    """
    if seeds not in SEED_COUNTS:
        raise TaskDataError(f"--seeds: {seeds} is not one of {SEED_COUNTS}")
    tasks = parse_tasks(list(tasks))
    check_folders(data, tasks)
    root = fs.as_path(workdir)
    recipe = fit_max_length(recipe, source_config(model), model, log)  # once, so the protocol records it
    base_seed = recipe.train.seed
    check_rerun(root, model, data, tokenizer, recipe, tasks, seeds)
    report = {"model": str(model), "data": str(data), "protocol": protocol(recipe, seeds), "tasks": {},
              "average_rule": AVERAGE_RULE}
    for name in tasks:
        task = GLUE_TASKS[name]
        runs = []
        for k in range(seeds):
            seed = base_seed + k
            r = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, seed=seed))
            where = root / name / f"seed-{seed}"
            log(f"== glue {name} seed {seed} ({len(runs) + 1}/{seeds}) -> {where}")
            summary = finetune(r, parse_task(f"glue/{name}", data_dir=str(data)), model, where,
                               tokenizer=tokenizer, log=log)
            if summary["status"] == "stopped":
                raise TaskDataError(f"{where}: stopped before the end; run `jaxbert glue` again to resume")
            evals = _final(summary)
            eval_name, metric = task.main_metric
            runs.append({"seed": seed, "score": evals[eval_name][metric], "evals": evals,
                         "workdir": str(where)})
        pick = _median_run(runs, task.main_metric)
        report["tasks"][name] = {"main": list(task.main_metric), "score": pick["score"], "evals": pick["evals"],
                                 "seed": pick["seed"], "runs": runs}
    report["average"] = statistics.fmean(t["score"] for t in report["tasks"].values())
    return report


PROTOCOL_FILE = "glue-protocol.json"  # WORKDIR's record of what its runs were trained with
SECTIONS = ("model", "data", "optim", "train")  # the recipe sections a score depends on
IGNORED = {"train.seed", "train.log_every"}  # the seed is the run folder's name; logging changes no score


def _where(p) -> str | None:
    return None if p is None else (os.fspath(p) if fs.is_url(p) else os.path.realpath(os.fspath(p)))


def _model_fingerprint(model) -> str | None:
    """What the model holds now: a workdir's newest checkpoint step, or the names, sizes and times of the
    files in the model's folder; None for a URL. Another model behind the same path changes it."""
    if fs.is_url(model):
        return None
    p = fs.as_path(model)
    if workdir_lib.is_workdir(p):
        steps = [int(c.name) for c in (p / workdir_lib.CHECKPOINTS).iterdir() if c.name.isdigit()]
        return f"checkpoint step {max(steps) if steps else None}"
    folder = p if p.is_dir() else p.parent
    h = hashlib.sha256()
    for f in sorted(folder.iterdir(), key=lambda f: f.name):
        if f.is_file() and (p.is_dir() or f.name.startswith(p.name)):
            st = os.stat(os.fspath(f))
            h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def run_identity(model, data, tokenizer, recipe: FinetuneRecipe) -> dict:
    """What a GLUE workdir's scores depend on, besides the seed: the model (where, and what it holds), the
    data, the tokenizer and the recipe's values."""
    sections = json.loads(json.dumps({k: v for k, v in recipe.to_dict().items() if k in SECTIONS}))
    values = {k: v for k, v in _flat(sections).items() if k not in IGNORED}
    return {"model": _where(model), "model_fingerprint": _model_fingerprint(model), "data": _where(data),
            "tokenizer": _where(tokenizer), "recipe": values}


def _differences(saved: dict, now: dict) -> list[str]:
    out = []
    for key in ("model", "model_fingerprint", "data", "tokenizer"):
        if key in saved and saved[key] != now[key]:
            what = "model's files" if key == "model_fingerprint" else key
            out.append(f"{what} {now[key]} now, {saved[key]} there")
    old, new = saved.get("recipe") or {}, now["recipe"]
    out += [f"{key} {new.get(key)} now, {old.get(key)} there" for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)]
    return out


def check_rerun(root, model, data, tokenizer, recipe: FinetuneRecipe, tasks, seeds: int) -> None:
    """A GLUE workdir holding runs is resumed only under the same protocol: the same model (path and
    files), data, tokenizer and recipe values; anything else is refused naming what differs, before
    anything is trained or written (its runs' scores belong to the protocol that made them). Then the
    protocol is recorded in WORKDIR/glue-protocol.json."""
    root = fs.as_path(root)
    now = run_identity(model, data, tokenizer, recipe)
    record = root / PROTOCOL_FILE
    if record.exists():
        try:
            saved = json.loads(record.read_text())
        except ValueError:
            raise TaskDataError(f"{record}: not readable JSON; move it away or pass a new --workdir") from None
        diff = _differences(saved, now)
        if diff:
            raise TaskDataError(f"{root}: holds GLUE runs of another protocol ({'; '.join(diff)}); their scores "
                                f"are not this model's or recipe's: pass a new --workdir, or the same model, data "
                                f"and recipe to resume")
    for name in tasks:  # runs made without a record (`jaxbert finetune --workdir` there): their recipe.yaml
        for k in range(seeds):
            where = root / name / f"seed-{recipe.train.seed + k}"
            saved = workdir_lib.read_recipe(where) if where.is_dir() else None
            if saved is None:
                continue
            theirs = {"model": _where(saved.get("source")) if saved.get("source") else now["model"],
                      "recipe": {k2: v for k2, v in _flat(json.loads(json.dumps(
                          {s2: saved.get(s2) or {} for s2 in SECTIONS}))).items() if k2 not in IGNORED}}
            diff = _differences(theirs, now)
            if diff:
                raise TaskDataError(f"{where}: a run of another protocol ({'; '.join(diff)}); its score is not "
                                    f"this model's or recipe's: pass a new --workdir")
    if not fs.is_url(root):
        root.mkdir(parents=True, exist_ok=True)
    fs.atomic_write_text(record, json.dumps(now, indent=2) + "\n")


def protocol(recipe: FinetuneRecipe, seeds: int) -> dict:
    o, t = recipe.optim, recipe.train
    return {"recipe": recipe.name, "learning_rate": o.learning_rate, "epochs": t.epochs, "steps": t.steps,
            "batch": t.per_device_batch_size * t.accum_steps, "warmup_ratio": o.warmup_ratio,
            "weight_decay": getattr(o, "weight_decay", None), "max_length": recipe.data.max_length, "seeds": seeds,
            "first_seed": t.seed, "score": "dev evaluation at the end of training"
            + ("" if seeds == 1 else f"; the run with the median main metric of {seeds} seeds")}


def glue_table(report: dict) -> str:
    """task, metric, dev score (main first, the others after), then the average of the main metrics."""
    rows = [("task", "metric", "dev", "also")]
    for name, t in report["tasks"].items():
        eval_name, metric = t["main"]
        label = metric if eval_name == "dev" else f"{eval_name} {metric}"
        also = [f"{(k if n == 'dev' else n + ' ' + k)} {v:.4f}" for n, ms in t["evals"].items()
                for k, v in ms.items() if k in GLUE_TASKS[name].metrics and (n, k) != (eval_name, metric)]
        if len(t["runs"]) > 1:
            also.append("seeds " + " / ".join(f"{r['score']:.4f}" for r in t["runs"]))
        rows.append((name, label, f"{t['score']:.4f}", ", ".join(also)))
    rows.append(("average", f"main metric of {len(report['tasks'])} tasks", f"{report['average']:.4f}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows]
    p = report["protocol"]
    lines.append(f"protocol: {p['recipe']}, lr {p['learning_rate']:g}, "
                 + (f"steps {p['steps']}" if p["steps"] else f"epochs {p['epochs']:g}")
                 + f", batch {p['batch']}, max length {p['max_length']}, {p['score']}")
    lines.append(f"average: {report['average_rule']}")
    return "\n".join(lines)


def write_report(report: dict, path) -> None:
    fs.atomic_write_text(path, json.dumps(report, indent=2) + "\n")
