"""The GLUE tasks as presets: where their files are, which columns hold text and label, their labels.

The layout is the one GLUE's download script writes: GLUE_DIR/<Folder>/train.tsv and dev.tsv
(MNLI: dev_matched.tsv and dev_mismatched.tsv), tab-separated without quoting, each with a
header row except CoLA's train/dev, whose four columns are source, label, label notes, sentence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from jaxbert.finetune import kinds
from jaxbert.finetune.metrics import GLUE_MAIN, GLUE_METRICS
from jaxbert.finetune.readers import read_task
from jaxbert.finetune.row_files import TaskDataError, local_path


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its folder, kind, text / label columns, label names and eval files."""

    name: str
    folder: str
    kind: str                                # "classification" or "regression"
    text_columns: tuple[str, ...]
    label_column: str
    labels: tuple[str, ...] | None          # class names in id order; None for regression
    evals: dict[str, str] = field(default_factory=lambda: {"dev": "dev.tsv"})
    columns: tuple[str, ...] | None = None  # field names of a headerless TSV
    train: str = "train.tsv"
    values: tuple[str, ...] | None = None   # how the files spell each class, in id order (None: as named)

    @property
    def metrics(self) -> tuple[str, ...]:
        return GLUE_METRICS[self.name]

    @property
    def main_metric(self) -> tuple[str, str]:
        """(eval name, metric) that picks the best checkpoint."""
        return GLUE_MAIN[self.name]


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")
# The binary tasks' files hold 0 / 1; their classes carry the names GLUE's papers (and the
# Hugging Face datasets) give them, so a model's id2label and `predict` say what a class means.
GLUE_TASKS = {t.name: t for t in (
    GlueTask("cola", "CoLA", "classification", ("sentence",), "label", ("unacceptable", "acceptable"),
             columns=("source", "label", "label_notes", "sentence"), values=_BINARY),
    GlueTask("sst2", "SST-2", "classification", ("sentence",), "label", ("negative", "positive"), values=_BINARY),
    GlueTask("mrpc", "MRPC", "classification", ("#1 String", "#2 String"), "Quality",
             ("not_equivalent", "equivalent"), values=_BINARY),
    GlueTask("qqp", "QQP", "classification", ("question1", "question2"), "is_duplicate",
             ("not_duplicate", "duplicate"), values=_BINARY),
    GlueTask("stsb", "STS-B", "regression", ("sentence1", "sentence2"), "score", None),
    GlueTask("mnli", "MNLI", "classification", ("sentence1", "sentence2"), "gold_label",
             ("contradiction", "entailment", "neutral"),
             evals={"matched": "dev_matched.tsv", "mismatched": "dev_mismatched.tsv"}),
    GlueTask("qnli", "QNLI", "classification", ("question", "sentence"), "label", _NLI2),
    GlueTask("rte", "RTE", "classification", ("sentence1", "sentence2"), "label", _NLI2),
    GlueTask("wnli", "WNLI", "classification", ("sentence1", "sentence2"), "label", ("not_entailment", "entailment"),
             values=_BINARY),
)}


def _squash(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def glue_task(name: str) -> GlueTask:
    """The preset for a task name (cola, sst2 / SST-2, mrpc, qqp, stsb / STS-B, mnli, qnli, rte, wnli)."""
    task = GLUE_TASKS.get(_squash(name))
    if task is None:
        raise TaskDataError(f"unknown GLUE task {name!r}; known: {', '.join(GLUE_TASKS)}")
    return task


def task_folder(task: GlueTask, folder: str | os.PathLike) -> Path:
    """The folder holding the task's files: `folder` itself or its <Folder> child (any case, - or _)."""
    root = local_path(folder)
    if (root / task.train).is_file():
        return root
    if (root / task.folder).is_dir():
        return root / task.folder
    if root.is_dir():
        for child in sorted(root.iterdir()):
            if child.is_dir() and _squash(child.name) == _squash(task.folder):
                return child
    raise TaskDataError(f"{root} holds neither {task.train} nor a {task.folder}/ folder for GLUE task {task.name}")


def load_glue(name: str, folder: str | os.PathLike):
    """(train examples, {eval name: examples}, labels) of a GLUE task from GLUE_DIR or GLUE_DIR/<Folder>.

    Eval names are "dev", or "matched" and "mismatched" for MNLI; labels is the preset's class
    names (None for STS-B), read from the files' spellings (0 / 1 for the binary tasks), so an
    eval label outside them is an error.
    """
    task = glue_task(name)
    where = task_folder(task, folder)
    return read_task(kinds.get(task.kind), where / task.train, {k: where / v for k, v in task.evals.items()},
                     labels=task.labels, text_columns=task.text_columns, label_column=task.label_column,
                     columns=task.columns, values=task.values)


def headerless(task: GlueTask, path) -> bool:
    """Whether a file of the task has no header row: CoLA's train / dev do, its test.tsv has one
    (index, sentence); a file whose first line names the text column is taken as headed."""
    if task.columns is None:
        return False
    with open(local_path(path), encoding="utf-8-sig") as f:
        first = f.readline().rstrip("\r\n").split("\t")
    return not set(task.text_columns) <= set(first)
