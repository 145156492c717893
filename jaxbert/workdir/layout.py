"""The workdir's layout: every name in it, the paths built from them, and the effective recipe.

The one module that spells the format's names (tests/test_layout.py checks it); the rest of the
package (this one's siblings too) goes through these constants.

    WORKDIR/
      recipe.yaml            the effective recipe (overrides and planned values applied)
      checkpoints/<step>/    Orbax: state (params, opt_state, step, rng) and meta (JSON: step,
                             every process's loader state, recipe, config, model_class)
      checkpoints.corrupt/   steps that could not be read back, set aside
      tokenizer/, data/      the tokenizer and prepared data, when the run built them here
      metrics.jsonl, tensorboard/
      hf/, curves.png, fill_mask.txt   outputs of a finished run
      best/, eval.json       fine-tuning: the best evaluation's model (Hugging Face) and every score
      downstream/<item>/     pretraining: the fine-tuning workdirs of outputs.downstream
      .jaxbert-workdir       the workdir's kind (jaxbert.workdir.claims)
"""

from __future__ import annotations

from pathlib import Path

import yaml

from jaxbert import fs
from jaxbert.errors import InputError, install_hint
from jaxbert.fs import atomic_write_text

CHECKPOINTS = "checkpoints"
CORRUPT = "checkpoints.corrupt"
STATE, META = "state", "meta"  # a checkpoint step's two Orbax items: the arrays and the JSON beside them
RECIPE = "recipe.yaml"
TOKENIZER = "tokenizer"
DATA = "data"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
EXPORT = "hf"
CURVES = "curves.png"
FILL_MASK = "fill_mask.txt"
BEST = "best"  # fine-tuning: the best evaluation's model, a Hugging Face directory
DOWNSTREAM = "downstream"  # pretraining: the fine-tuning workdirs of outputs.downstream, one folder per item
KIND_FILE = ".jaxbert-workdir"  # which kind of workdir a folder is: {"kind": PRETRAINING | FINETUNING}
PRETRAINING, FINETUNING = "pretraining", "finetuning"
LOCK = ".jaxbert-train.lock"  # jaxbert.engine.lock's file
EVAL = "eval.json"  # fine-tuning: every evaluation and the best score
OUTPUTS = {CURVES: "loss and accuracy curves",
           EXPORT: f"Hugging Face model + tokenizer (transformers with PyTorch: {install_hint('torch')})",
           FILL_MASK: "fill-mask showcase, with the rank of the right word",
           METRICS: "every logged metric, one JSON per line",
           TENSORBOARD: "TensorBoard event files (pip install tensorboard; tensorboard --logdir {path})",
           RECIPE: "the recipe as run",
           BEST: "fine-tuning: the best checkpoint by the task's main metric, a Hugging Face directory",
           EVAL: "fine-tuning: every evaluation's metrics and the best score",
           TOKENIZER: "the tokenizer trained for this run",
           DATA: "the prepared data built for this run",
           CHECKPOINTS: "Orbax checkpoints; the run resumes from the newest"}


class WorkdirError(InputError):
    """A workdir that holds no readable checkpoint, or one whose records are incomplete."""


def path(workdir, name: str) -> Path:
    """WORKDIR/name for one of this module's names (CHECKPOINTS, RECIPE, METRICS, ...)."""
    return fs.as_path(workdir) / name


def downstream_dir(workdir, item: str) -> Path:
    """The fine-tuning workdir of one outputs.downstream item inside a pretraining workdir."""
    return fs.as_path(workdir) / DOWNSTREAM / item


def write_recipe(workdir, recipe: dict) -> Path:
    """Writes the recipe as run (a plain dict) to WORKDIR/recipe.yaml."""
    workdir = fs.as_path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(workdir / RECIPE, yaml.safe_dump(recipe, sort_keys=False))
    return workdir / RECIPE


def read_recipe(workdir) -> dict | None:
    """WORKDIR/recipe.yaml as a dict, or None when the workdir has none."""
    p = fs.as_path(workdir) / RECIPE
    return (yaml.safe_load(p.read_text()) or {}) if p.exists() else None


def is_workdir(path) -> bool:
    """Whether a folder is a training workdir (it has CHECKPOINTS)."""
    return (fs.as_path(path) / CHECKPOINTS).is_dir()


def workdirs_near(path, depth: int = 3) -> list[Path]:
    """Training workdirs that hold `path` or that `path` holds (down to `depth` levels), nearest first."""
    p = fs.as_path(path)
    found = [q for q in (p, *p.parents) if is_workdir(q)]
    if p.is_dir():
        level = [p]
        for _ in range(depth):
            level = [c for q in level for c in q.iterdir() if c.is_dir() and c.name != CHECKPOINTS]
            found += [c for c in level if is_workdir(c)]
    return found
