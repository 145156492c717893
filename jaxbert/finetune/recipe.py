"""Fine-tuning recipes: a YAML file of six sections mapped onto typed dataclasses.

Sections: model (compute options: dtype, remat, scan), data (sequence length, QA windows),
optim (the optimizer's own section, as in pretraining, with fine-tuning's defaults), train (epochs or steps, batch,
seed, evaluation cadence), parallel and checkpoint (the pretraining sections). Keys are
checked by jaxbert.engine.recipe's machinery: an unknown key or a wrong type is a
RecipeError naming it, and ``--set key=value`` overrides are checked the same way.
Shipped recipes live in configs/finetune/ (``jaxbert finetune --list``).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

from jaxbert.engine import recipe as engine_recipe
from jaxbert.engine.optim import OptimSection
from jaxbert.engine.recipe import (AT_LEAST_1, POSITIVE, CheckpointSection, ComputeSection, ParallelSection,  # noqa: F401
                                   RecipeError, RunRecipe, check_ranges, check_sections,
                                   recipe_names)

FOLDER = "finetune"  # configs/finetune/
DEFAULT_RECIPE = "finetune-glue"


def finetune_recipe_names() -> dict[str, str]:
    """Name -> first sentence of the header of every shipped fine-tuning recipe."""
    return recipe_names(FOLDER)


@dataclasses.dataclass
class FinetuneModelSection(ComputeSection):
    """How the task model computes; the architecture itself comes from --model. Fine-tuning runs the
    pooled heads' last layer at [CLS] alone by default (first_token_only: the same logits, less work)."""

    first_token_only: bool = True


@dataclasses.dataclass
class FinetuneDataSection:
    max_length: int = 128  # tokens per sequence (QA: per window); batches are cut to lengths planned below it
    stride: int = 128  # QA: tokens shared by consecutive windows of a long context
    max_query_length: int = 64  # QA: question tokens kept
    n_best: int = 20  # QA: start / end candidates per window
    max_answer_length: int = 30  # QA: longest answer, in tokens
    version_2: bool = False  # QA: SQuAD v2.0 (unanswerable questions; scored with squad_v2)

    def check(self, prefix: str = "data.") -> None:
        check_ranges(prefix, {k: (getattr(self, k), *POSITIVE) for k in (
            "max_length", "stride", "max_query_length", "n_best", "max_answer_length")})


# Fine-tuning's defaults over every optimizer section's own: a small peak and warmup over 10% of the steps.
OPTIM_DEFAULTS = {"learning_rate": 2e-5, "warmup_ratio": 0.1}


@dataclasses.dataclass
class FinetuneTrainSection:
    epochs: float = 3.0  # passes over the training set (ignored when steps is set)
    steps: Optional[int] = None  # optimizer steps; None = epochs x batches per epoch
    per_device_batch_size: int = 32  # sequences per device per micro-batch
    accum_steps: int = 1
    seed: int = 42  # head init, shuffling and dropout
    log_every: int = 50
    eval_every: int = 0  # evaluate every N steps too; 0 = at each epoch end only (always at the end)
    eval_batch_size: Optional[int] = None  # global eval batch; None = the global train batch
    norm_metrics: bool = False

    def check(self, prefix: str = "train.") -> None:
        check_ranges(prefix, {
            "epochs": (self.epochs, *POSITIVE),
            "steps": (self.steps, *AT_LEAST_1),
            "per_device_batch_size": (self.per_device_batch_size, *AT_LEAST_1),
            "accum_steps": (self.accum_steps, *AT_LEAST_1),
            "seed": (self.seed, lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
            "log_every": (self.log_every, *AT_LEAST_1),
            "eval_every": (self.eval_every, lambda v: v >= 0, ">= 0 (0: at each epoch end only)"),
            "eval_batch_size": (self.eval_batch_size, *AT_LEAST_1)})


@dataclasses.dataclass
class FinetuneRecipe(RunRecipe):
    checkpoint: CheckpointSection = dataclasses.field(default_factory=lambda: CheckpointSection(every_steps=500, keep=2))
    model: FinetuneModelSection = dataclasses.field(default_factory=FinetuneModelSection)
    data: FinetuneDataSection = dataclasses.field(default_factory=FinetuneDataSection)
    optim: OptimSection = dataclasses.field(default_factory=lambda: OptimSection(**OPTIM_DEFAULTS),
                                            metadata={"defaults": OPTIM_DEFAULTS})
    train: FinetuneTrainSection = dataclasses.field(default_factory=FinetuneTrainSection)

    def optim_for(self, total_steps: int) -> OptimSection:
        """The optim section with its warmup in steps for a run of total_steps (optim.warmup_steps, or
        warmup_ratio x total_steps): what the run's schedule does, as its log says it."""
        return dataclasses.replace(self.optim, warmup_steps=self.optim.warmup(total_steps))


def from_dict(data: dict) -> FinetuneRecipe:
    return engine_recipe.from_dict(FinetuneRecipe, data, check_sections)


def load(name_or_path: str = DEFAULT_RECIPE, overrides: list[str] = ()) -> FinetuneRecipe:
    """A shipped recipe (by name) or a YAML file, with ``key=value`` overrides applied and checked."""
    return engine_recipe.load(FinetuneRecipe, check_sections, name_or_path, overrides, FOLDER)


def __getattr__(name: str):
    if name == "FinetuneOptimSection":  # each optimizer has its own section now (jaxbert.engine.optim)
        warnings.warn("jaxbert.finetune.recipe.FinetuneOptimSection is gone: use "
                      "jaxbert.engine.optim.OptimSection(**OPTIM_DEFAULTS, ...), which builds the section of "
                      "the optimizer named", DeprecationWarning, stacklevel=2)
        return lambda **fields: OptimSection(**{**OPTIM_DEFAULTS, **fields})
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
