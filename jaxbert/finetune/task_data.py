"""What a fine-tuning run learns: the task kind, its files and columns, and how it is scored.

`TaskSpec` names the data (a kind with train / eval files, or a GLUE preset with its folder);
`read_task_data` reads and checks every file under the kind's options before anything is
written, and returns the examples with the label list, the options, the metrics to report and
the (eval set, metric) that picks the best checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from jaxbert.finetune import kinds
from jaxbert.finetune.kinds import Kind
from jaxbert.finetune.glue import glue_task, load_glue
from jaxbert.finetune.readers import check_label_names, read_task
from jaxbert.finetune.row_files import TaskDataError


@dataclass(frozen=True)
class TaskSpec:
    """kind: a registered Kind (jaxbert.finetune.kinds.KINDS; a name is resolved to it); or glue (a
    GLUE task name) with data_dir."""

    kind: Kind
    train: str | None = None
    evals: dict[str, str] = field(default_factory=dict)  # eval set name -> file
    text_columns: tuple[str, ...] = ("sentence",)
    label_column: str = "label"
    labels: tuple[str, ...] | None = None  # class / tag names in id order; None = from the training file
    glue: str | None = None
    data_dir: str | None = None

    def __post_init__(self):
        if not isinstance(self.kind, Kind):
            object.__setattr__(self, "kind", kinds.get(self.kind))

    @property
    def name(self) -> str:
        return f"glue-{glue_task(self.glue).name}" if self.glue else self.kind.name

    def to_dict(self) -> dict:
        return {"kind": self.kind.name, "train": self.train, "evals": dict(self.evals),
                "text_columns": list(self.text_columns), "label_column": self.label_column,
                "labels": None if self.labels is None else list(self.labels), "glue": self.glue,
                "data_dir": self.data_dir}


def parse_task(task: str, train=None, evals: Sequence[str] = (), data_dir=None, **kwargs) -> TaskSpec:
    """A TaskSpec from the command line's --task (a kind or glue/NAME), --train, --eval files, --data."""
    if task.lower().startswith("glue/"):
        preset = glue_task(task.split("/", 1)[1])
        if data_dir is None:
            raise TaskDataError(f"--task {task} needs --data GLUE_DIR (the folder GLUE's download script wrote)")
        return TaskSpec(kinds.get(preset.kind), glue=preset.name, data_dir=str(data_dir), labels=preset.labels)
    if task not in kinds.KINDS:
        raise TaskDataError(f"unknown task {task!r}; expected one of {', '.join(kinds.KINDS)} or glue/NAME")
    sources = getattr(kinds.get(task), "reads_sources", False)  # its files may be the recipe's data.sources
    if (train is None and not sources) or not evals:
        raise TaskDataError(f"--task {task} needs --train FILE{' (or data.sources)' if sources else ''} and --eval FILE")
    if kwargs.get("labels") is not None:
        kwargs["labels"] = check_label_names(kwargs["labels"])
    names = {}
    for path in evals:
        stem = Path(path).stem or "eval"
        name, k = stem, 2
        while name in names:
            name, k = f"{stem}{k}", k + 1
        names[name] = str(path)
    return TaskSpec(kinds.get(task), None if train is None else str(train), names, **kwargs)


@dataclass
class TaskData:
    spec: TaskSpec
    train: list
    evals: dict[str, list]
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]  # metric names for metrics.compute
    main: tuple[str, str]  # (eval set, metric key) choosing the best checkpoint
    options: object = None  # the kind's options (its Kind.Options) the files were read under

    @property
    def kind(self) -> Kind:
        return self.spec.kind


def read_task_data(spec: TaskSpec, options=None) -> TaskData:
    """Every file of the task read and checked under the kind's options (default: the kind's
    defaults; TaskDataError names the file and line at fault)."""
    kind = spec.kind
    if options is None:
        options = kind.options()
    if spec.glue:
        preset = glue_task(spec.glue)
        train, evals, labels = load_glue(spec.glue, spec.data_dir)
        return TaskData(spec, train, evals, labels, preset.metrics, preset.main_metric, options)
    train, evals, labels = read_task(kind, spec.train, spec.evals, labels=spec.labels, options=options,
                                     table={"text_columns": spec.text_columns, "label_column": spec.label_column})
    names, main = kind.metrics(options)
    return TaskData(spec, train, evals, labels, names, (next(iter(evals)), main), options)

