"""Fine-tuning recipes: a YAML file of six sections mapped onto typed dataclasses.

Sections: model (compute options: dtype, remat, scan), data (sequence length, QA windows),
optim (the pretraining OptimSection plus warmup_ratio), train (epochs or steps, batch,
seed, evaluation cadence), parallel and checkpoint (the pretraining sections). Keys are
checked by jaxbert.train.recipe's machinery: an unknown key or a wrong type is a
RecipeError naming it, and ``--set key=value`` overrides are checked the same way.
Shipped recipes live in configs/finetune/ (``jaxbert finetune --list``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from jaxbert.model.dropout import DROPOUT_IMPLS
from jaxbert.model.options import ATTENTION_IMPLS, REMAT_POLICIES
from jaxbert.train.recipe import (CheckpointSection, ComputeSection, OptimSection, ParallelSection, RecipeError, build,
                                  read_yaml, recipe_names)

FOLDER = "finetune"  # configs/finetune/
DEFAULT_RECIPE = "finetune-glue"


def finetune_recipe_names() -> dict[str, str]:
    """Name -> first sentence of the header of every shipped fine-tuning recipe."""
    return recipe_names(FOLDER)


@dataclasses.dataclass
class FinetuneModelSection(ComputeSection):
    """How the task model computes; the architecture itself comes from --model."""


@dataclasses.dataclass
class FinetuneDataSection:
    max_length: int = 128  # tokens per sequence (QA: per window); batches use power-of-two buckets below it
    stride: int = 128  # QA: tokens shared by consecutive windows of a long context
    max_query_length: int = 64  # QA: question tokens kept
    n_best: int = 20  # QA: start / end candidates per window
    max_answer_length: int = 30  # QA: longest answer, in tokens
    version_2: bool = False  # QA: SQuAD v2.0 (unanswerable questions; scored with squad_v2)


@dataclasses.dataclass
class FinetuneOptimSection(OptimSection):
    learning_rate: float = 2e-5
    eps: float = 1e-6
    warmup_ratio: float = 0.1  # linear warmup over this share of the total steps (replaces warmup_steps)


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


@dataclasses.dataclass
class FinetuneRecipe:
    name: str = "custom"
    model: FinetuneModelSection = dataclasses.field(default_factory=FinetuneModelSection)
    data: FinetuneDataSection = dataclasses.field(default_factory=FinetuneDataSection)
    optim: FinetuneOptimSection = dataclasses.field(default_factory=FinetuneOptimSection)
    train: FinetuneTrainSection = dataclasses.field(default_factory=FinetuneTrainSection)
    parallel: ParallelSection = dataclasses.field(default_factory=ParallelSection)
    checkpoint: CheckpointSection = dataclasses.field(default_factory=lambda: CheckpointSection(every_steps=500, keep=2))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def optim_for(self, total_steps: int) -> OptimSection:
        """The OptimSection make_optimizer takes: warmup_steps = warmup_ratio x total_steps."""
        fields = {f.name: getattr(self.optim, f.name) for f in dataclasses.fields(OptimSection)}
        fields["warmup_steps"] = int(round(self.optim.warmup_ratio * total_steps))
        return OptimSection(**fields)


def _validate(r: FinetuneRecipe) -> None:
    choices = {"model.dtype": (r.model.dtype, ("float32", "bfloat16", "float16")),
               "model.param_dtype": (r.model.param_dtype, ("float32", "bfloat16")),
               "model.attention_impl": (r.model.attention_impl, ATTENTION_IMPLS),
               "model.dropout_impl": (r.model.dropout_impl, DROPOUT_IMPLS),
               "model.remat_policy": (r.model.remat_policy, tuple(REMAT_POLICIES)),
               "optim.name": (r.optim.name, ("adamw", "lamb")),
               "optim.schedule": (r.optim.schedule, ("linear", "polynomial", "wsd", "constant")),
               "optim.mu_dtype": (r.optim.mu_dtype, (None, "float32", "bfloat16")),
               "parallel.strategy": (r.parallel.strategy, ("mesh", "pmap"))}
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise RecipeError(f"{key}: {value!r} is not one of {allowed}")
    positive = {"data.max_length": r.data.max_length, "data.stride": r.data.stride,
                "data.max_query_length": r.data.max_query_length, "data.n_best": r.data.n_best,
                "data.max_answer_length": r.data.max_answer_length, "train.epochs": r.train.epochs,
                "train.per_device_batch_size": r.train.per_device_batch_size,
                "train.accum_steps": r.train.accum_steps, "train.log_every": r.train.log_every,
                "checkpoint.every_steps": r.checkpoint.every_steps, "checkpoint.keep": r.checkpoint.keep,
                "optim.learning_rate": r.optim.learning_rate, "model.attention_chunks": r.model.attention_chunks,
                "model.ffn_chunks": r.model.ffn_chunks}
    for key in ("steps", "eval_batch_size"):
        if getattr(r.train, key) is not None:
            positive[f"train.{key}"] = getattr(r.train, key)
    for key, value in positive.items():
        if value <= 0:
            raise RecipeError(f"{key}: must be > 0, got {value!r}")
    if r.train.eval_every < 0:
        raise RecipeError(f"train.eval_every: must be >= 0, got {r.train.eval_every}")
    if not 0 <= r.optim.warmup_ratio < 1:
        raise RecipeError(f"optim.warmup_ratio: must be in [0, 1), got {r.optim.warmup_ratio}")
    if r.parallel.strategy == "pmap" and r.parallel.fsdp:
        raise RecipeError("parallel.fsdp: FSDP needs parallel.strategy=mesh")


def from_dict(data: dict) -> FinetuneRecipe:
    if not isinstance(data, dict):
        raise RecipeError(f"a recipe is a mapping of sections, got {type(data).__name__}")
    recipe = build(FinetuneRecipe, data)
    _validate(recipe)
    return recipe


def load(name_or_path: str = DEFAULT_RECIPE, overrides: list[str] = ()) -> FinetuneRecipe:
    """A shipped recipe (by name) or a YAML file, with ``key=value`` overrides applied and checked."""
    path, data = read_yaml(name_or_path, overrides, FOLDER)
    try:
        return from_dict(data)
    except RecipeError as e:
        raise RecipeError(f"{path}: {e}") from e
