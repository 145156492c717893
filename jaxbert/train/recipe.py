"""Training recipes: a YAML file mapped onto typed dataclasses.

A recipe has seven sections (model, data, optim, train, parallel, checkpoint,
outputs).
Every key is checked: an unknown key or a value of the wrong type is a
``RecipeError`` that names the key (``optim.learning_rate``). ``--set
key=value`` overrides are parsed as YAML scalars and checked the same way.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from jaxbert.data.masking import masked_slots
from jaxbert.model.config import BertConfig, ConfigError
from jaxbert.model.dropout import DROPOUT_IMPLS
from jaxbert.model.options import ATTENTION_IMPLS, REMAT_POLICIES, ModelOptions
from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.workdir import write_recipe

DEFAULT_RECIPE = "tiny-demo"
BERT_FIELDS = {f.name for f in dataclasses.fields(BertConfig)} - {"extra"}


class RecipeError(InputError):
    """A bad recipe key or value; the message names the key."""


# ---- the recipes shipped with jaxbert (packaged as jaxbert.configs/train), by name ----
def recipe_path(name_or_path: str, folder: str = "train") -> Path:
    """A file path, or the name of a recipe shipped in configs/<folder>/ (train, finetune)."""
    if fs.is_url(name_or_path):
        return fs.as_path(name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or os.sep in str(name_or_path):
        return path
    return Path(str(resources.files("jaxbert.configs").joinpath(folder, f"{name_or_path}.yaml")))


def recipe_names(folder: str = "train") -> dict[str, str]:
    """Name -> first comment line of every recipe shipped with jaxbert in configs/<folder>/."""
    names = {}
    for entry in sorted(resources.files("jaxbert.configs").joinpath(folder).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            header = []
            for line in entry.read_text().splitlines():
                if not line.startswith("#"):
                    break
                header.append(line.lstrip("# ").strip())
            text = " ".join(header).split(": ", 1)[-1]  # the header starts "NAME: ..."
            names[entry.name[:-5]] = re.split(r"(?<! al)(?<!e\.g)\.(?:\s|$)", text, maxsplit=1)[0]
    return names


@dataclasses.dataclass
class ComputeSection:
    """How a model computes (jaxbert.model.options.ModelOptions), shared by the pretraining and
    fine-tuning recipes' model sections."""
    dtype: str = "float32"  # compute dtype; bfloat16 keeps fp32 master params via param_dtype
    param_dtype: str = "float32"
    scan_layers: bool = False
    remat_policy: str = "none"  # none | dots | dots_no_batch | full | offload | auto (planned with the batch)
    attention_impl: str = "einsum"  # einsum | dot_product (jax.nn.dot_product_attention where no attention dropout is drawn)
    attention_chunks: int = 1  # blocks of queries, each recomputed in the backward pass (memory at long T)
    ffn_chunks: int = 1  # blocks of tokens through each feed-forward block, the same way
    dropout_impl: str = "hash"  # hash (counter hash, cheap on TPU) | threefry (flax's nn.Dropout)

    def options(self) -> ModelOptions:
        """The ModelOptions this section describes (an 'auto' remat_policy is planned before this)."""
        return ModelOptions(dtype=self.dtype, param_dtype=self.param_dtype, scan_layers=self.scan_layers,
                            remat_policy=self.remat_policy, attention_impl=self.attention_impl,
                            attention_chunks=self.attention_chunks, ffn_chunks=self.ffn_chunks,
                            dropout_impl=self.dropout_impl)


@dataclasses.dataclass
class ModelSection(ComputeSection):
    preset: str = "bert-tiny"  # preset name, config.json or a directory holding one
    config: dict = dataclasses.field(default_factory=dict)  # BertConfig fields over the preset
    model_class: str = "BertForMaskedLM"  # or BertForPreTraining (adds the NSP loss), RobertaForMaskedLM, ...
    init_from: Optional[str] = None  # checkpoint for continued pretraining (from_pretrained)


@dataclasses.dataclass
class DataSection:
    source: str = "prepared"  # prepared (jaxbert data prepare) | synthetic (random tokens, tests)
    dir: Optional[str] = None  # prepared data; None = built from the embedded corpus in WORKDIR/data
    tokenizer: Optional[str] = None  # tokenizer dir; None = the one beside the data
    vocab_size: int = 4096  # of the tokenizer trained when dir is None
    seq_len: int = 128
    mask_rate: float = 0.15
    eval_mask_rate: Optional[float] = None  # held-out masking; None = mask_rate
    max_predictions: Optional[int] = None  # masked positions per sequence (M)
    whole_word_mask: bool = False
    validation_fraction: float = 0.02  # held out when the data is built here
    nsp: bool = False  # sentence pairs with next-sentence labels (BertForPreTraining)

    def split_mask_rate(self, split: str = "train") -> float:
        """The masking rate of a split: eval_mask_rate for held-out batches when set."""
        return self.mask_rate if split == "train" or self.eval_mask_rate is None else self.eval_mask_rate

    def masked_slots(self, split: str = "train") -> int:
        """M of this split's batches (jaxbert.data.masking.masked_slots)."""
        return masked_slots(self.seq_len, self.split_mask_rate(split), self.max_predictions, self.whole_word_mask)


@dataclasses.dataclass
class OptimSection:
    name: str = "adamw"  # adamw | lamb
    learning_rate: float = 1e-4  # peak
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01  # never applied to biases and LayerNorm params
    schedule: str = "linear"  # linear | polynomial | wsd | constant (all after linear warmup)
    warmup_steps: int = 0
    decay_power: float = 1.0  # polynomial decay exponent
    end_lr_factor: float = 0.0  # final lr = learning_rate * end_lr_factor
    decay_fraction: float = 0.2  # wsd: share of the steps spent decaying at the end
    clip_norm: Optional[float] = 1.0  # global-norm clipping; None = off
    # dtype of AdamW's and LAMB's first moment: None (each param's own) | "float32" | "bfloat16"
    # (half its bytes; rounds m to 8 significant bits at every update)
    mu_dtype: Optional[str] = None


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


@dataclasses.dataclass
class ParallelSection:
    strategy: str = "mesh"  # mesh (jit + NamedSharding) | pmap (as run_mlm_flax)
    fsdp: bool = False  # shard params and optimizer state over the data axis
    num_devices: Optional[int] = None  # None = every device
    # Logical axis -> mesh axis when fsdp is on ("data") or off (None).
    fsdp_axes: list = dataclasses.field(default_factory=lambda: ["embed"])
    coordinator_address: Optional[str] = None  # multi-host off TPU: host:port of process 0
    num_processes: Optional[int] = None
    process_id: Optional[int] = None


@dataclasses.dataclass
class CheckpointSection:
    every_steps: int = 1000
    keep: int = 3
    async_save: bool = True


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


@dataclasses.dataclass
class Recipe:
    name: str = "custom"
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    data: DataSection = dataclasses.field(default_factory=DataSection)
    optim: OptimSection = dataclasses.field(default_factory=OptimSection)
    train: TrainSection = dataclasses.field(default_factory=TrainSection)
    parallel: ParallelSection = dataclasses.field(default_factory=ParallelSection)
    checkpoint: CheckpointSection = dataclasses.field(default_factory=CheckpointSection)
    outputs: OutputsSection = dataclasses.field(default_factory=OutputsSection)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def bert_config(self, vocab_size: int | None = None) -> BertConfig:
        """The model's BertConfig: the preset, then model.config, then the tokenizer's vocabulary size."""
        try:
            base = BertConfig.from_pretrained(self.model.preset)
        except ConfigError as e:
            raise RecipeError(f"model.preset: {e}") from e
        for key in self.model.config:
            if key not in BERT_FIELDS:
                raise RecipeError(f"model.config.{key}: not a BertConfig field")
        try:
            return base.with_overrides(self.model.config, vocab_size, self.model.model_class)
        except (ConfigError, TypeError) as e:
            raise RecipeError(f"model.config: {e}") from e


# ---- loading and checking --------------------------------------------------

# Keys that may say "auto": the loop plans them for its devices (jaxbert.train.plan).
AUTO_KEYS = ("train.per_device_batch_size", "model.remat_policy")


def _check(value: Any, tp: Any, key: str) -> Any:
    """Returns value converted to type tp, or raises RecipeError naming key."""
    if value == "auto" and key in AUTO_KEYS:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _check(value, inner, key)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecipeError(f"{key}: expected a mapping, got {value!r}")
        return build(tp, value, key + ".")
    expected = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
                dict: "a mapping", list: "a list"}[origin or tp]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        if not -2**63 < value < 2**63:
            raise RecipeError(f"{key}: {value} is out of range")
        return float(value)
    if tp is float and isinstance(value, str):
        try:  # PyYAML reads 1e-3 (no dot) as a string
            value = float(value)
        except ValueError:
            pass
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise RecipeError(f"{key}: expected a finite number, got {value!r}")
    ok = isinstance(value, origin or tp) and not (tp in (int, float) and isinstance(value, bool))
    if not ok:
        raise RecipeError(f"{key}: expected {expected}, got {value!r}")
    if tp is int and not -2**63 < value < 2**63:
        raise RecipeError(f"{key}: {value} is out of range (a 64-bit integer)")
    return value


def build(cls, data: dict, prefix: str = ""):
    """A recipe dataclass (or section) from a mapping: every key checked, RecipeError naming a bad one."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise RecipeError(f"{prefix}{key}: unknown key; expected one of {sorted(names)}")
    kwargs = {k: _check(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def _ranges(r: Recipe) -> dict:
    """Dotted key -> (value, test, what the value must be) for every numeric field (None skips a test)."""
    o, d, t, m, p, c = r.optim, r.data, r.train, r.model, r.parallel, r.checkpoint
    positive = (lambda v: v > 0, "> 0")
    at_least_1 = (lambda v: v >= 1, ">= 1")
    non_negative = (lambda v: v >= 0, ">= 0")
    unit_open = (lambda v: 0 <= v < 1, "in [0, 1)")
    return {
        "model.attention_chunks": (m.attention_chunks, *at_least_1),
        "model.ffn_chunks": (m.ffn_chunks, *at_least_1),
        "data.vocab_size": (d.vocab_size, *positive),
        "data.seq_len": (d.seq_len, *positive),
        "data.mask_rate": (d.mask_rate, lambda v: 0 < v <= 1, "in (0, 1]"),
        "data.eval_mask_rate": (d.eval_mask_rate, lambda v: 0 < v <= 1, "in (0, 1]"),
        "data.max_predictions": (d.max_predictions, *at_least_1),
        "data.validation_fraction": (d.validation_fraction, *unit_open),
        "optim.learning_rate": (o.learning_rate, *positive),
        "optim.b1": (o.b1, *unit_open),
        "optim.b2": (o.b2, *unit_open),
        "optim.eps": (o.eps, *positive),
        "optim.weight_decay": (o.weight_decay, *non_negative),
        "optim.warmup_steps": (o.warmup_steps, *non_negative),
        "optim.decay_power": (o.decay_power, *positive),
        "optim.end_lr_factor": (o.end_lr_factor, lambda v: 0 <= v <= 1, "in [0, 1]"),
        "optim.decay_fraction": (o.decay_fraction, lambda v: 0 < v <= 1, "in (0, 1]"),
        "optim.clip_norm": (o.clip_norm, lambda v: v > 0, "> 0 (null turns clipping off)"),
        "train.steps": (t.steps, *at_least_1),
        "train.per_device_batch_size": (t.per_device_batch_size, lambda v: v >= 1, ">= 1 or auto"),
        "train.accum_steps": (t.accum_steps, *at_least_1),
        "train.seed": (t.seed, lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
        "train.log_every": (t.log_every, *at_least_1),
        "train.eval_every": (t.eval_every, lambda v: v >= 0, ">= 0 (0: only at the end)"),
        "train.eval_batches": (t.eval_batches, lambda v: v >= 0, ">= 0 (0: the whole validation split)"),
        "parallel.num_devices": (p.num_devices, *at_least_1),
        "parallel.num_processes": (p.num_processes, *at_least_1),
        "parallel.process_id": (p.process_id, lambda v: 0 <= v < (p.num_processes or 2**63),
                                f"in [0, parallel.num_processes {p.num_processes})" if p.num_processes else ">= 0"),
        "checkpoint.every_steps": (c.every_steps, *at_least_1),
        "checkpoint.keep": (c.keep, *at_least_1),
    }


def _check_coordinator(p: ParallelSection) -> None:
    """parallel.coordinator_address: auto, or HOST:PORT with a port in 1..65535."""
    address = p.coordinator_address
    if address is None or address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RecipeError(f"parallel.coordinator_address: {address!r} is not HOST:PORT (a port in 1..65535) "
                          f"or auto")


def position_limit(cfg: BertConfig) -> int:
    """The longest sequence the model's position table holds (RoBERTa's positions start at pad_token_id + 1)."""
    return cfg.max_position_embeddings - ((cfg.pad_token_id or 0) + 1 if cfg.is_roberta else 0)


def _check_seq_len(r: Recipe, cfg: BertConfig) -> None:
    limit = position_limit(cfg)
    if r.data.seq_len > limit:
        table = (f"model.config.max_position_embeddings {cfg.max_position_embeddings} less pad_token_id + 1 "
                 f"({limit} positions)" if cfg.is_roberta else
                 f"model.config.max_position_embeddings {cfg.max_position_embeddings}")
        raise RecipeError(f"data.seq_len: {r.data.seq_len} exceeds the model's {table}; lower data.seq_len "
                          f"or raise model.config.max_position_embeddings")


def _validate(r: Recipe) -> None:
    choices = {"model.model_class": (r.model.model_class, ("BertForMaskedLM", "BertForPreTraining",
                                                           "RobertaForMaskedLM", "XLMRobertaForMaskedLM")),
               "model.dtype": (r.model.dtype, ("float32", "bfloat16", "float16")),
               "model.param_dtype": (r.model.param_dtype, ("float32", "bfloat16")),
               "model.attention_impl": (r.model.attention_impl, ATTENTION_IMPLS),
               "model.dropout_impl": (r.model.dropout_impl, DROPOUT_IMPLS),
               "model.remat_policy": (r.model.remat_policy, tuple(REMAT_POLICIES) + ("auto",)),
               "data.source": (r.data.source, ("prepared", "synthetic")),
               "optim.name": (r.optim.name, ("adamw", "lamb")),
               "optim.schedule": (r.optim.schedule, ("linear", "polynomial", "wsd", "constant")),
               "optim.mu_dtype": (r.optim.mu_dtype, (None, "float32", "bfloat16")),
               "parallel.strategy": (r.parallel.strategy, ("mesh", "pmap"))}
    for key, (value, allowed) in choices.items():
        if value not in allowed:
            raise RecipeError(f"{key}: {value!r} is not one of {allowed}")
    for key, (value, test, meaning) in _ranges(r).items():
        if value is not None and value != "auto" and not test(value):
            raise RecipeError(f"{key}: must be {meaning}, got {value!r}")
    _check_coordinator(r.parallel)
    if r.parallel.strategy == "pmap" and r.parallel.fsdp:
        raise RecipeError("parallel.fsdp: FSDP needs parallel.strategy=mesh")
    if r.data.nsp and r.model.model_class != "BertForPreTraining":
        raise RecipeError("data.nsp: next-sentence data needs model.model_class=BertForPreTraining")
    _check_seq_len(r, r.bert_config())  # model.preset and model.config checked now, before any data is prepared
    if r.data.source == "prepared" and r.data.dir is None and r.data.validation_fraction == 0:
        raise RecipeError("data.validation_fraction: 0 holds out no rows, but every run evaluates on held-out "
                          "rows (at least at its end); give a fraction > 0")
    for item in r.outputs.fill_mask:
        ok = isinstance(item, str) or (isinstance(item, dict) and set(item) <= {"text", "answer"}
                                       and isinstance(item.get("text"), str)
                                       and isinstance(item.get("answer", ""), str))
        if not ok:
            raise RecipeError(f"outputs.fill_mask: {item!r} is neither a sentence nor {{text: ..., answer: ...}}")
    _check_downstream(r.outputs.downstream)


DOWNSTREAM_KINDS = ("classification", "regression", "tokens", "qa", "choice")  # finetune.readers.KINDS
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
            raise RecipeError(f"{where}: task is required (classification, regression, tokens, qa, choice or glue/NAME)")
        if task not in DOWNSTREAM_KINDS and not task.lower().startswith("glue/"):
            raise RecipeError(f"{where}: unknown task {task!r}; one of {', '.join(DOWNSTREAM_KINDS)} or glue/NAME")
        need = ("data",) if task.lower().startswith("glue/") else ("train", "eval")
        for key in need:
            if not isinstance(item.get(key), str):
                raise RecipeError(f"{where}: task {task} needs {key}: a path")
        for key in need:  # found now, not after pretraining
            if not fs.is_url(item[key]) and not os.path.exists(item[key]):
                raise RecipeError(f"{where}: {key} {item[key]}: no such file or folder")
        if not isinstance(item.get("set", []), list) or not all(isinstance(v, str) for v in item.get("set", [])):
            raise RecipeError(f"{where}: set is a list of key=value strings")


def from_dict(data: dict) -> Recipe:
    if not isinstance(data, dict):
        raise RecipeError(f"a recipe is a mapping of sections, got {type(data).__name__}")
    recipe = build(Recipe, data)
    _validate(recipe)
    return recipe


def read_yaml(name_or_path: str, overrides: list[str] = (), folder: str = "train") -> tuple[Path, dict]:
    """(path, data) of a recipe file (or a shipped name) with ``key=value`` overrides applied."""
    path = recipe_path(name_or_path, folder)
    bare_name = not fs.is_url(name_or_path) and path != Path(name_or_path)
    if bare_name and not path.is_file():  # a bare name that is no shipped recipe
        raise RecipeError(f"--config {name_or_path}: neither a YAML file nor a shipped recipe "
                          f"({', '.join(recipe_names(folder))})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise RecipeError(f"cannot read recipe {path}: {e}") from e
    except yaml.YAMLError as e:
        raise RecipeError(f"recipe {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of sections, got a YAML {type(data).__name__}")
    data.setdefault("name", path.stem)
    for item in overrides:
        apply_override(data, item)
    return path, data


def load(name_or_path: str = DEFAULT_RECIPE, overrides: list[str] = ()) -> Recipe:
    """Reads a recipe and applies ``key=value`` overrides (dotted keys)."""
    path, data = read_yaml(name_or_path, overrides)
    try:
        return from_dict(data)
    except RecipeError as e:
        raise RecipeError(f"{path}: {e}") from e


def apply_override(data: dict, item: str) -> None:
    """``optim.learning_rate=3e-3`` -> data['optim']['learning_rate'] = 0.003 (in place)."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise RecipeError(f"--set {item!r}: expected key=value")
    try:
        value = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        raise RecipeError(f"--set {key}: {text!r} is not a YAML value (quote a string, e.g. "
                          f"{key}='\"...\"')") from None
    *parents, leaf = key.split(".")
    node = data
    for i, part in enumerate(parents):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise RecipeError(f"--set {key}: {'.'.join(parents[:i + 1])} is not a section")
    node[leaf] = value


def save_effective(recipe: Recipe, workdir: str | Path) -> Path:
    """Writes the recipe as run (overrides applied) to the workdir (jaxbert.workdir.RECIPE)."""
    return write_recipe(workdir, recipe.to_dict())
