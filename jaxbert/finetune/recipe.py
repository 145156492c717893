"""Fine-tuning recipes: a YAML file of seven sections mapped onto typed dataclasses.

Sections: model (compute options: dtype, remat, scan), data (sequence length), kinds (each
task kind's own options under its name, typed by its Kind.Options: kinds.qa's windows and
decoding, kinds.tokens' stride; a recipe may carry several kinds' options), optim (the optimizer's
own section, as in pretraining, with fine-tuning's defaults), train (epochs or steps, batch, seed,
evaluation cadence), parallel and checkpoint (the pretraining sections). Keys are checked by
jaxbert.engine.recipe's machinery: an unknown key or a wrong type is a RecipeError naming it,
and ``--set key=value`` overrides are checked the same way. Shipped recipes live in
configs/finetune/ (``jaxbert finetune --list``).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Optional

from jaxbert.engine import recipe as engine_recipe
from jaxbert.engine.optim import OptimSection
from jaxbert.engine.recipe import (AT_LEAST_1, POSITIVE, CheckpointSection, ComputeSection, ParallelSection,  # noqa: F401
                                   RecipeError, RunRecipe, check_ranges, check_sections, read_number,
                                   recipe_names)
from jaxbert.finetune.kinds import KINDS

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


# Former keys of the data section that are now kinds' options (QA's; a tagger's stride).
MOVED_DATA_KEYS = ("stride", "max_query_length", "n_best", "max_answer_length", "version_2")




@dataclasses.dataclass(frozen=True)
class FileSource:
    """One training file of data.sources (the embedding kind's): its rows drawn in proportion to weight."""
    file: str  # a JSONL / CSV / TSV / Parquet file of the kind's columns, as --train names one
    weight: float = 1.0  # > 0; only the ratios between the sources count (an integer kept as written)
    name: Optional[str] = None  # keys the run's reports; None: the file's name without its extension

    KEYS = ("file", "weight", "name")

    @property
    def label(self) -> str:
        return self.name if self.name is not None else (Path(self.file).stem or self.file)

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.KEYS if getattr(self, key) is not None}

    @classmethod
    def read(cls, item, where: str) -> "FileSource":
        """One item of data.sources: {file: PATH, weight: 3, name: NAME}; RecipeError naming the key at fault."""
        return engine_recipe.read_source(cls, item, where, "{file: train.jsonl, weight: 3}",
                                         "a training file (JSONL, CSV, TSV, Parquet)")


def read_file_sources(value, key: str) -> Optional[tuple]:
    """data.sources as FileSources, each named apart from the others; None: the one --train file."""
    return engine_recipe.read_named(value, key, FileSource.read, "a list of {file: FILE, weight: W}", empty=False)


@dataclasses.dataclass
class FinetuneDataSection:
    max_length: int = 128  # tokens per sequence (QA: per window); batches are cut to lengths planned below it
    # several training files in place of --train (the embedding kind): [{file: A, weight: 3}, {file: B}], read
    # into FileSources; null: the --train file alone
    sources: Optional[tuple[FileSource, ...]] = dataclasses.field(default=None,
                                                                  metadata={"read": read_file_sources})
    # each global batch drawn from one source (chosen by the weights), as contrastors and Arctic-Embed
    # do; false: each row of a batch drawn from a source by the weights
    batch_per_source: bool = False
    # Deprecated: kinds.<kind>.<key> now; a value here moves to every kind that has the key
    # (with a DeprecationWarning).
    stride: Optional[int] = None
    max_query_length: Optional[int] = None
    n_best: Optional[int] = None
    max_answer_length: Optional[int] = None
    version_2: Optional[bool] = None

    def check(self, prefix: str = "data.") -> None:
        check_ranges(prefix, {"max_length": (self.max_length, *POSITIVE)})


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
    # task kind -> its own options (the fields of its Kind.Options), e.g. qa: {n_best: 20}; checked on load
    kinds: dict = dataclasses.field(default_factory=dict)
    optim: OptimSection = dataclasses.field(default_factory=lambda: OptimSection(**OPTIM_DEFAULTS),
                                            metadata={"defaults": OPTIM_DEFAULTS})
    train: FinetuneTrainSection = dataclasses.field(default_factory=FinetuneTrainSection)

    def __post_init__(self):
        if not isinstance(self.kinds, dict):
            raise RecipeError(f"kinds: expected a mapping of task kind -> its options, got {self.kinds!r}")
        moved = {k: getattr(self.data, k) for k in MOVED_DATA_KEYS if getattr(self.data, k) is not None}
        if moved:  # a former recipe: each kind that has the option takes the value
            warnings.warn(f"recipe keys {', '.join(f'data.{k}' for k in moved)} are deprecated: they are task kinds' "
                          f"options now, kinds.<kind>.<key> (e.g. kinds.qa.n_best)", DeprecationWarning, stacklevel=2)
            merged = {name: dict(values) for name, values in self.kinds.items()}
            for name, kind in KINDS.items():
                own = {f.name for f in dataclasses.fields(kind.Options)} & set(moved)
                if own:
                    merged[name] = {**{k: moved[k] for k in sorted(own)}, **merged.get(name, {})}
            self.kinds = merged
            self.data = dataclasses.replace(self.data, **{k: None for k in moved})
        for name, values in self.kinds.items():
            if name not in KINDS:
                raise RecipeError(f"kinds.{name}: unknown task kind; known: {', '.join(KINDS)}")
            if not isinstance(values, dict):
                raise RecipeError(f"kinds.{name}: expected a mapping of {name}'s options, got {values!r}")
            KINDS[name].options(values, f"kinds.{name}.")  # refuses an unknown key or a bad value now

    def options_for(self, kind):
        """The task kind's typed options (its Kind.Options): kinds.<name>'s keys over the kind's defaults."""
        return kind.options(self.kinds.get(kind.name), f"kinds.{kind.name}.")

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["data"] = {k: v for k, v in out["data"].items() if not (k in MOVED_DATA_KEYS and v is None)}
        if self.data.sources is not None:  # as the list of mappings it was read from
            out["data"]["sources"] = [source.to_dict() for source in self.data.sources]
        return out

    def optim_for(self, total_steps: int) -> OptimSection:
        """The optim section with its warmup in steps for a run of total_steps (optim.warmup_steps, or
        warmup_ratio x total_steps): what the run's schedule does, as its log says it."""
        return dataclasses.replace(self.optim, warmup_steps=self.optim.warmup(total_steps))


def from_dict(data: dict) -> FinetuneRecipe:
    return engine_recipe.from_dict(FinetuneRecipe, data, check_sections)


def load(name_or_path: str = DEFAULT_RECIPE, overrides: list[str] = ()) -> FinetuneRecipe:
    """A shipped recipe (by name) or a YAML file, with ``key=value`` overrides applied and checked."""
    return engine_recipe.load(FinetuneRecipe, check_sections, name_or_path, overrides, FOLDER)
