"""Training recipes: a YAML file mapped onto typed dataclasses.

A recipe has seven sections (model, data, optim, train, parallel, checkpoint,
outputs).
Every key is checked: an unknown key or a value of the wrong type is a
``RecipeError`` that names the key (``optim.learning_rate``). ``--set
key=value`` overrides are parsed as YAML scalars and checked the same way.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

from jaxbert import fs
from jaxbert.data.loader import source_name
from jaxbert.data.masking import masked_slots
from jaxbert.data.prepare import PACKINGS
from jaxbert.data.tokenizer import TOKENIZER_KINDS
from jaxbert.engine.optim import OptimSection
from jaxbert.engine.recipe import (AT_LEAST_1, POSITIVE, UNIT_OPEN, AUTO_KEYS, CheckpointSection,  # noqa: F401
                                   ComputeSection, ParallelSection, RecipeError, RunRecipe, apply_override, build,
                                   check_choice, check_ranges, check_sections, read_number, read_yaml,
                                   recipe_names, recipe_path)
from jaxbert.engine import recipe as engine_recipe
from jaxbert.train import rtd_recipe
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.configs import ConfigError, build_config
from jaxbert.model.configs import position_limit as config_position_limit
from jaxbert.model.families import BY_MODEL_TYPE, family_of, pretraining_classes
from jaxbert.model.registry import spec_of
from jaxbert.workdir import write_recipe

DEFAULT_RECIPE = "tiny-demo"


def __getattr__(name: str):
    """PRETRAINING_CLASSES: the classes an MLM pretraining run trains, as the registered families list them now
    (jaxbert.model.families.pretraining_classes; a family registered at run time counts)."""
    if name == "PRETRAINING_CLASSES":
        return pretraining_classes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")




@dataclasses.dataclass
class ModelSection(ComputeSection):
    # preset name, config.json or a directory holding one, or a family's model_type ("modernbert":
    # its config class's defaults, ModernBERT-base)
    preset: str = "bert-tiny"
    config: dict = dataclasses.field(default_factory=dict)  # fields of the family's config class over the preset
    model_class: str = "BertForMaskedLM"  # or BertForPreTraining (adds the NSP loss), RobertaForMaskedLM, ...
    init_from: Optional[str] = None  # checkpoint for continued pretraining (from_pretrained)
    # init_from is a smaller model of the family: fill each larger param by centre tiling (ModernBERT-large
    # from base, jaxbert.train.tiling); false: every param must have the model's shape
    init_tile: bool = False

    def check(self, prefix: str = "model.") -> None:
        # an RTD recipe trains a discriminator (checked against train.objective by rtd_recipe.check_recipe)
        check_choice(f"{prefix}model_class", self.model_class, pretraining_classes() + rtd_recipe.DISCRIMINATOR_CLASSES)
        if self.init_tile and not self.init_from:
            raise RecipeError(f"{prefix}init_tile: true tiles the params of {prefix}init_from, which is not set")
        ComputeSection.check(self, prefix, auto=True)


@dataclasses.dataclass(frozen=True)
class SourceSection:
    """One folder of a mixture (an item of data.sources), read and checked once, where the recipe is
    read (``read``); the data checks (the folders exist and fit each other, jaxbert.train.sources.check_data)
    and the loader read these fields."""
    dir: str  # a folder made by `jaxbert data prepare`
    # rows drawn in proportion to it (> 0; read by the recipe's number reader, an integer kept as written);
    # None: data.temperature sets it from the folder's training rows
    weight: Optional[float] = None
    name: Optional[str] = None  # keys the run's reports (tokens/NAME, epochs/NAME); None: the folder's name

    KEYS = ("dir", "weight", "name")

    @property
    def label(self) -> str:
        """The name the run's reports and the loader's state use: name, or the folder's name."""
        return self.name if self.name is not None else source_name(self.dir)

    def to_dict(self) -> dict:
        """As recipe.yaml records it: the keys the recipe gave (a default None is left out)."""
        return {key: getattr(self, key) for key in self.KEYS if getattr(self, key) is not None}

    @classmethod
    def read(cls, item, where: str) -> "SourceSection":
        """One item of data.sources (``where``: data.sources[k]): a mapping of known keys, a folder, a
        finite weight > 0 if given, a name that can key the reports; RecipeError naming the key."""
        return engine_recipe.read_source(cls, item, where, "{dir: FOLDER, weight: 3}",
                                         "a folder made by `jaxbert data prepare`")


def read_sources(value, key: str) -> Optional[tuple]:
    """data.sources as typed sources (SourceSection), each named apart from the others; None: no mixture.
    What depends on the other data keys (dir, temperature) is DataSection.check's."""
    return engine_recipe.read_named(value, key, SourceSection.read)


@dataclasses.dataclass
class DataSection:
    source: str = "prepared"  # prepared (jaxbert data prepare) | synthetic (random tokens, tests)
    dir: Optional[str] = None  # prepared data; None = built from the embedded corpus in WORKDIR/data
    tokenizer: Optional[str] = None  # tokenizer dir; None = the one beside the data
    vocab_size: int = 4096  # of the tokenizer trained when dir is None
    tokenizer_kind: str = "wordpiece"  # of the tokenizer trained when dir is None: wordpiece (BERT) | bpe (byte-level, ModernBERT)
    seq_len: int = 128
    mask_rate: float = 0.15
    eval_mask_rate: Optional[float] = None  # held-out masking; None = mask_rate
    max_predictions: Optional[int] = None  # masked positions per sequence (M)
    whole_word_mask: bool = False
    validation_fraction: float = 0.02  # held out when the data is built here
    nsp: bool = False  # sentence pairs with next-sentence labels (BertForPreTraining)
    # stream: documents joined with [SEP] into rows (attention and positions cross documents);
    # documents: whole documents share rows, each attending only to itself with its own positions;
    # none: one document per padded row. Prepared data must have been made so (`data prepare --packing`).
    packing: str = "stream"
    # a mixture, in place of dir: [{dir: FOLDER, weight: 3}, {dir: FOLDER, weight: 1}], each source's rows
    # drawn in proportion to its weight (an optional name: keys the reports, default the folder's name);
    # read into SourceSections; null: no mixture (an empty list is refused: it would fall back to data.dir
    # or the embedded corpus)
    sources: Optional[tuple[SourceSection, ...]] = dataclasses.field(default=None, metadata={"read": read_sources})
    temperature: Optional[float] = None  # weights = each source's training rows ** temperature (no weight keys)

    def check(self, prefix: str = "data.") -> None:
        check_choice(f"{prefix}source", self.source, ("prepared", "synthetic"))
        self._check_sources(prefix)
        check_choice(f"{prefix}packing", self.packing, PACKINGS)
        check_choice(f"{prefix}tokenizer_kind", self.tokenizer_kind, tuple(TOKENIZER_KINDS))
        trained = self.dir is None and self.tokenizer is None
        if self.whole_word_mask and trained and not TOKENIZER_KINDS[self.tokenizer_kind].word_pieces:
            raise RecipeError(f"{prefix}whole_word_mask: true needs WordPiece's ## pieces, which the "
                              f"{TOKENIZER_KINDS[self.tokenizer_kind].name} of {prefix}tokenizer_kind: "
                              f"{self.tokenizer_kind} lacks; set whole_word_mask: false")
        check_ranges(prefix, {
            "vocab_size": (self.vocab_size, *POSITIVE),
            "seq_len": (self.seq_len, *POSITIVE),
            "mask_rate": (self.mask_rate, lambda v: 0 < v <= 1, "in (0, 1]"),
            "eval_mask_rate": (self.eval_mask_rate, lambda v: 0 < v <= 1, "in (0, 1]"),
            "max_predictions": (self.max_predictions, *AT_LEAST_1),
            "validation_fraction": (self.validation_fraction, *UNIT_OPEN)})

    def _check_sources(self, prefix: str) -> None:
        """data.sources (each source read by SourceSection.read) against the other data keys: a weight > 0
        for every source, or data.temperature instead; not beside data.dir; refused naming the key."""
        check_ranges(prefix, {"temperature": (self.temperature, lambda v: 0 <= v <= 1, "in [0, 1]")})
        if self.sources is not None and not self.sources:
            raise RecipeError(f"{prefix}sources: an empty list names no folder; list the mixture's folders "
                              f"({{dir: FOLDER, weight: 3}}), or leave {prefix}sources out to train on "
                              f"{prefix}dir or the embedded corpus")
        if not self.sources:
            if self.temperature is not None:
                raise RecipeError(f"{prefix}temperature: weighs the folders of {prefix}sources, and there are none")
            return
        if self.dir is not None:
            raise RecipeError(f"{prefix}sources: give {prefix}dir (one folder) or {prefix}sources (a mixture), "
                              "not both")
        if self.source != "prepared":
            raise RecipeError(f"{prefix}sources: a mixture reads prepared folders; {prefix}source is {self.source}")
        for k, source in enumerate(self.sources):
            where = f"{prefix}sources[{k}]"
            if self.temperature is not None and source.weight is not None:
                raise RecipeError(f"{where}.weight: {prefix}temperature sets every weight from the sources' "
                                  "sizes; give weights or a temperature, not both")
            if self.temperature is None and source.weight is None:
                raise RecipeError(f"{where}.weight: missing; every source needs a weight > 0 "
                                  f"(or set {prefix}temperature)")
        if self.temperature is None and sum(float(source.weight) for source in self.sources) == float("inf"):
            raise RecipeError(f"{prefix}sources: the weights add up to more than a float holds; scale them down "
                              "(only their ratios count)")

    def source_dirs(self) -> list[str]:
        return [source.dir for source in self.sources or ()]

    def source_names(self) -> list[str]:
        return [source.label for source in self.sources or ()]

    def source_weights(self) -> list[float] | None:
        """None when data.temperature sets them."""
        return None if self.temperature is not None else [float(source.weight) for source in self.sources or ()]

    def split_mask_rate(self, split: str = "train") -> float:
        """The masking rate of a split: eval_mask_rate for held-out batches when set."""
        return self.mask_rate if split == "train" or self.eval_mask_rate is None else self.eval_mask_rate

    def masked_slots(self, split: str = "train") -> int:
        """M of this split's batches (jaxbert.data.masking.masked_slots)."""
        return masked_slots(self.seq_len, self.split_mask_rate(split), self.max_predictions, self.whole_word_mask)


@dataclasses.dataclass
class TrainSection:
    steps: int = 1000  # optimizer steps
    per_device_batch_size: int = 32  # sequences per device per micro-batch; auto = planned (jaxbert plan)
    accum_steps: int = 1  # micro-batches per optimizer step
    seed: int = 0
    log_every: int = 50
    eval_every: int = 500  # 0 = only at the end
    eval_batches: int = 8  # held-out batches per evaluation (fixed masking); 0 = the whole split
    norm_metrics: bool = True  # log update_norm and param_norm too (two more reads of every param per step)
    # batch-size warmup: the global batch (sequences) of the first step, growing linearly to the full
    # batch over batch_warmup_tokens, in whole micro-batches (jaxbert.train.batch_warmup); null = off
    batch_warmup_start: Optional[int] = None
    batch_warmup_tokens: int = 0
    # mlm | rtd: replaced-token detection, a generator and a discriminator (the rtd section, jaxbert.train.rtd_recipe)
    objective: str = "mlm"

    def check(self, prefix: str = "train.") -> None:
        if self.batch_warmup_start is None and self.batch_warmup_tokens != 0:
            raise RecipeError(f"{prefix}batch_warmup_tokens: {self.batch_warmup_tokens} tokens of batch-size "
                              f"warmup, but {prefix}batch_warmup_start (the first step's global batch) is not set; "
                              f"set both, or neither")
        if self.batch_warmup_start is not None:
            if self.accum_steps < 2:
                raise RecipeError(f"{prefix}batch_warmup_start: the batch grows by micro-batches, but "
                                  f"{prefix}accum_steps is {self.accum_steps}; give the full batch as "
                                  f"micro-batches (accum_steps > 1)")
            if self.batch_warmup_tokens < 1:
                raise RecipeError(f"{prefix}batch_warmup_tokens: {self.batch_warmup_tokens}; the warmup needs "
                                  f"the tokens it grows over (> 0)")
        check_ranges(prefix, {
            "steps": (self.steps, *AT_LEAST_1),
            "per_device_batch_size": (self.per_device_batch_size, lambda v: v >= 1, ">= 1 or auto"),
            "accum_steps": (self.accum_steps, *AT_LEAST_1),
            "seed": (self.seed, lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
            "log_every": (self.log_every, *AT_LEAST_1),
            "eval_every": (self.eval_every, lambda v: v >= 0, ">= 0 (0: only at the end)"),
            "eval_batches": (self.eval_batches, lambda v: v >= 0, ">= 0 (0: the whole validation split)"),
            "batch_warmup_start": (self.batch_warmup_start, lambda v: v >= 1, ">= 1 (null: off)")})


@dataclasses.dataclass
class OutputsSection:
    """What a finished run leaves beside its checkpoints (primary process only)."""
    plot: bool = True  # WORKDIR/curves.png
    export: bool = False  # a Hugging Face directory in WORKDIR/hf, tokenizer beside it
    # sentences with [MASK] to complete; {text: ..., answer: word} also prints the right word's rank
    fill_mask: list = dataclasses.field(default_factory=list)
    # fine-tuning tasks run on the final checkpoint by `jaxbert train` (jaxbert.finetune.downstream):
    # {task: classification|regression|tokens|qa|choice, train: FILE, eval: FILE} or {task: glue/NAME,
    # data: GLUE_DIR}; optional config (a fine-tuning recipe), set ([key=value]), tokenizer, text_columns,
    # label_column, labels. Scores join the run's summary and metrics.jsonl.
    downstream: list = dataclasses.field(default_factory=list)

    def check(self, prefix: str = "outputs.") -> None:
        for item in self.fill_mask:
            ok = isinstance(item, str) or (isinstance(item, dict) and set(item) <= {"text", "answer"}
                                           and isinstance(item.get("text"), str)
                                           and isinstance(item.get("answer", ""), str))
            if not ok:
                raise RecipeError(f"{prefix}fill_mask: {item!r} is neither a sentence nor {{text: ..., answer: ...}}")
        _check_downstream(self.downstream)


@dataclasses.dataclass
class Recipe(RunRecipe):
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    data: DataSection = dataclasses.field(default_factory=DataSection)
    optim: OptimSection = dataclasses.field(default_factory=OptimSection)
    train: TrainSection = dataclasses.field(default_factory=TrainSection)
    outputs: OutputsSection = dataclasses.field(default_factory=OutputsSection)
    rtd: rtd_recipe.RtdSection = dataclasses.field(default_factory=rtd_recipe.RtdSection)  # train.objective: rtd

    def to_dict(self) -> dict:
        """As recipe.yaml records it; data.sources as the list of mappings it was read from."""
        out = super().to_dict()
        if self.data.sources is not None:
            out["data"]["sources"] = [source.to_dict() for source in self.data.sources]
        if self.train.objective != "rtd":  # the rtd section is recorded by the recipes that use it
            out.pop("rtd", None)
        return out

    def model_config(self, vocab_size: int | None = None):
        """The model's config, of the class its family reads (BertConfig, ModernBertConfig): the preset,
        then model.config, then the tokenizer's vocabulary size (jaxbert.model.config.build_config)."""
        try:
            base_type = build_config(self.model.preset, {}).model_type
        except ConfigError as e:
            raise RecipeError(f"model.preset: {e}") from e
        model_type = self.model.config.get("model_type", base_type)
        if model_type not in BY_MODEL_TYPE:
            raise RecipeError(f"model.config.model_type: {model_type!r} is not supported; jaxbert builds "
                              f"{tuple(BY_MODEL_TYPE)}")
        config_class = BY_MODEL_TYPE[model_type].config_class
        known = {f.name for f in dataclasses.fields(config_class)} - {"extra"}
        for key in self.model.config:
            if key not in known:
                raise RecipeError(f"model.config.{key}: not a {config_class.__name__} field")
        try:
            return build_config(self.model.preset, self.model.config, vocab_size, self.model.model_class)
        except (ConfigError, TypeError) as e:
            raise RecipeError(f"model.config: {e}") from e


# ---- checking ----------------------------------------------------------------

def position_limit(cfg: BertConfig) -> int:
    """The longest sequence the model's position table holds (RoBERTa's positions start at pad_token_id + 1)."""
    return config_position_limit(cfg)


def _check_seq_len(r: Recipe, cfg: BertConfig) -> None:
    limit = position_limit(cfg)
    if r.data.seq_len > limit:
        offset = family_of(cfg).position_offset(cfg)
        table = (f"model.config.max_position_embeddings {cfg.max_position_embeddings} less pad_token_id + 1 "
                 f"({limit} positions)" if offset else
                 f"model.config.max_position_embeddings {cfg.max_position_embeddings}")
        raise RecipeError(f"data.seq_len: {r.data.seq_len} exceeds the model's {table}; lower data.seq_len "
                          f"or raise model.config.max_position_embeddings")


def _validate(r: Recipe) -> None:
    check_sections(r)  # each section its own values
    if r.data.packing != "stream" and (r.data.nsp or r.data.source == "synthetic"):
        raise RecipeError(f"data.packing: {r.data.packing!r} packs documents of prepared mlm data; "
                          f"{'nsp sentence pairs' if r.data.nsp else 'synthetic data'} take packing stream")
    if r.data.nsp and not spec_of(r.model.model_class).nsp:
        nsp_classes = " or ".join(c for c in pretraining_classes() if spec_of(c).nsp)
        raise RecipeError(f"data.nsp: next-sentence data needs model.model_class={nsp_classes}")
    cfg = r.model_config()  # model.preset and model.config checked now, before any data is prepared
    rtd_recipe.check_recipe(r, cfg)  # train.objective and the rtd section against the model
    _check_seq_len(r, cfg)
    if r.data.packing != "stream" and not family_of(cfg).segment_ids:
        raise RecipeError(f"data.packing: {r.data.packing!r} gives the model segment ids, which "
                          f"{r.model.model_class} does not take yet; use packing stream")
    if r.data.source == "prepared" and r.data.dir is None and not r.data.sources and r.data.validation_fraction == 0:
        raise RecipeError("data.validation_fraction: 0 holds out no rows, but every run evaluates on held-out "
                          "rows (at least at its end); give a fraction > 0")


DOWNSTREAM_KEYS = ("task", "train", "eval", "data", "config", "set", "tokenizer", "text_columns", "label_column",
                   "labels")


def _check_downstream(items: list) -> None:
    """outputs.downstream: each item a mapping of known keys naming its task and files (read at the end)."""
    for k, item in enumerate(items):
        where = f"outputs.downstream[{k}]"
        if not isinstance(item, dict):
            raise RecipeError(f"{where}: {item!r} is not a mapping like {{task: glue/sst2, data: GLUE_DIR}}")
        unknown = sorted(set(item) - set(DOWNSTREAM_KEYS))
        if unknown:
            raise RecipeError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(DOWNSTREAM_KEYS)}")
        task = item.get("task")
        if not isinstance(task, str) or not task:
            raise RecipeError(f"{where}: task is required (a fine-tuning task kind or glue/NAME)")
        # the kind's name is checked against the registry by `jaxbert train` right after this
        # (jaxbert.finetune.downstream.check_items: train/ does not import finetune/)
        need = ("data",) if task.lower().startswith("glue/") else ("train", "eval")
        for key in need:
            if not isinstance(item.get(key), str):
                raise RecipeError(f"{where}: task {task} needs {key}: a path")
        for key in need:  # found now, not after pretraining
            if not fs.is_url(item[key]) and not os.path.exists(item[key]):
                raise RecipeError(f"{where}: {key} {item[key]}: no such file or folder")
        if not isinstance(item.get("set", []), list) or not all(isinstance(v, str) for v in item.get("set", [])):
            raise RecipeError(f"{where}: set is a list of key=value strings")


def preset_model_class(preset: str) -> str | None:
    """The class a recipe that names only ``preset`` trains: its family's first pretraining class
    (ModernBertForMaskedLM for "modernbert"); None when the preset cannot be read (the recipe's
    own checks then name the fault)."""
    try:
        return family_of(build_config(preset, {})).pretraining_classes[0]
    except (ConfigError, KeyError, IndexError, OSError):
        return None


def from_dict(data: dict) -> Recipe:
    return engine_recipe.from_dict(Recipe, data, _validate)


def load(name_or_path: str = DEFAULT_RECIPE, overrides: list[str] = ()) -> Recipe:
    """Reads a recipe and applies ``key=value`` overrides (dotted keys)."""
    return engine_recipe.load(Recipe, _validate, name_or_path, overrides, "train")


def save_effective(recipe: Recipe, workdir: str | Path) -> Path:
    """Writes the recipe as run (overrides applied) to the workdir (jaxbert.workdir.RECIPE)."""
    return write_recipe(workdir, recipe.to_dict())
