"""A checkpoint's meta: the JSON record beside its arrays, and the fields read back from it.

It holds the step, every process's loader state, the recipe as run, the model config and class; a
fine-tuning run's task record and evaluation history; the metric sums of the steps not yet logged.
``state_tree`` is what the arrays hold. Writing and reading them on disk: jaxbert.workdir.checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping

from jaxbert.model.bert.config import BertConfig

_TASK_META = "finetune"  # the meta key of a fine-tuning run's task record and history
_WINDOW_META = "metric_window"  # the metric sums of the steps after the last log row, up to the saved step


def state_tree(step, params, opt_state, rng) -> dict:
    """What a checkpoint holds as arrays; everything else goes in ``checkpoint_meta``'s JSON."""
    return {"step": step, "params": params, "opt_state": opt_state, "rng": rng}


def checkpoint_meta(step: int, loader_states: list, recipe: dict, config: BertConfig, model_class: str,
                    task: tuple[dict, list] | None = None) -> dict:
    """The JSON beside a checkpoint's arrays: loader_states holds every process's loader state, in order
    (each records the global stream position, the same in every process: a resume reads the first).
    task: a fine-tuning run's (record a resume must match, evaluation history)."""
    meta = {"step": step, "loader": loader_states, "recipe": recipe, "config": config.to_dict(),
            "model_class": model_class}
    if task is not None:
        meta[_TASK_META] = {"task": task[0], "history": task[1]}
    return meta


def saved_recipe(meta: Mapping) -> dict:
    """The recipe (as a dict) a checkpoint was saved with; {} for a checkpoint without one."""
    return dict(meta.get("recipe") or {})


def with_metric_window(meta: dict, window: dict | None) -> dict:
    """meta with the unlogged steps' metric sums (``MetricWindow.carry``): a run resumed from this step
    logs the rows a run that never stopped writes."""
    if window is not None:
        meta[_WINDOW_META] = window
    return meta


def metric_window(meta: Mapping | None) -> dict | None:
    """The metric sums ``with_metric_window`` recorded; None for a checkpoint without them."""
    return (meta or {}).get(_WINDOW_META)


def task_record(meta: Mapping) -> dict:
    """The task record a fine-tuning checkpoint was saved with ({} for a pretraining one)."""
    return dict((meta.get(_TASK_META) or {}).get("task") or {})


def task_history(meta: Mapping) -> list:
    """The evaluation history a fine-tuning checkpoint was saved with."""
    return list((meta.get(_TASK_META) or {}).get("history") or [])
