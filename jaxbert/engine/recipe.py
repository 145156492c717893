"""The recipe machinery under pretraining and fine-tuning: YAML onto typed sections, every key checked.

A recipe is a dataclass of sections; ``build`` maps a mapping onto it, refusing an unknown
key or a value of the wrong type with a ``RecipeError`` that names the key
(``optim.learning_rate``). Each section checks its own values (``check(prefix)``); the
allowed choices come from the registries that use them (``ModelOptions`` for the compute
options, ``jaxbert.engine.optim.OPTIMIZERS`` / ``SCHEDULES`` for the optimizer), so they are
spelt once. ``--set key=value`` overrides are parsed as YAML scalars and checked the same way.

The sections every engine run has live here: compute options, optimizer (in optim.py),
parallel layout and checkpoints. Pretraining's and fine-tuning's own sections (data, train,
outputs) sit in their packages.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
import warnings
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.model.dropout import DROPOUT_IMPLS
from jaxbert.model.options import ATTENTION_IMPLS, RELATIVE_IMPLS, REMAT_POLICIES, ModelOptions


class RecipeError(InputError):
    """A bad recipe key or value; the message names the key."""


POSITIVE = (lambda v: v > 0, "> 0")
AT_LEAST_1 = (lambda v: v >= 1, ">= 1")
NON_NEGATIVE = (lambda v: v >= 0, ">= 0")
UNIT_OPEN = (lambda v: 0 <= v < 1, "in [0, 1)")


def check_ranges(prefix: str, ranges: dict) -> None:
    """ranges: field -> (value, test, what the value must be); None and "auto" values are not tested."""
    for key, (value, test, meaning) in ranges.items():
        if value is not None and value != "auto" and not test(value):
            raise RecipeError(f"{prefix}{key}: must be {meaning}, got {value!r}")


def check_choice(key: str, value, allowed) -> None:
    if value not in allowed:
        raise RecipeError(f"{key}: {value!r} is not one of {tuple(allowed)}")


# ---- the recipes shipped with jaxbert (packaged as jaxbert.configs/<folder>), by name ----
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


# ---- the sections every run has ----------------------------------------------------------
# Keys of ModelOptions that are not recipe keys: decode is an inference switch, not a training option.
_NOT_IN_RECIPES = ("decode",)


@dataclasses.dataclass
class ComputeSection:
    """How a model computes: ModelOptions' fields as recipe keys (jaxbert.model.options.ModelOptions
    documents each), dtypes spelt by name; only remat_policy 'auto' is the recipe's own. A field added
    to ModelOptions is added here too (tests/engine/test_recipe_sections.py holds the two together)."""
    dtype: str = "float32"  # float32 | bfloat16 | float16
    param_dtype: str = "float32"  # float32 | bfloat16
    scan_layers: bool = False
    remat_policy: str = "none"  # one of REMAT_POLICIES, or auto (planned for the devices)
    attention_impl: str = "einsum"  # one of ATTENTION_IMPLS
    attention_chunks: int = 1
    ffn_chunks: int = 1
    # Recipes default to the hash dropout, which is cheap on TPU (ModelOptions' own default is flax's threefry).
    dropout_impl: str = "hash"
    first_token_only: bool = False
    vocab_loss_chunk: Optional[int] = None  # None: chunked from a 65,536-entry vocabulary up; 0: plain; n: chunks of n
    relative_impl: str = "auto"  # one of RELATIVE_IMPLS (DeBERTa's relative terms)

    def options(self, **changes) -> ModelOptions:
        """The ModelOptions this section describes (an 'auto' remat_policy is planned before this)."""
        return ModelOptions(**{**{name: getattr(self, name) for name in COMPUTE_FIELDS}, **changes})

    def check(self, prefix: str = "model.", auto: bool = False) -> None:
        """auto: the recipe may leave remat_policy to the planner."""
        check_choice(f"{prefix}dtype", self.dtype, ("float32", "bfloat16", "float16"))
        check_choice(f"{prefix}param_dtype", self.param_dtype, ("float32", "bfloat16"))
        check_choice(f"{prefix}attention_impl", self.attention_impl, ATTENTION_IMPLS)
        check_choice(f"{prefix}dropout_impl", self.dropout_impl, DROPOUT_IMPLS)
        check_choice(f"{prefix}relative_impl", self.relative_impl, RELATIVE_IMPLS)
        check_choice(f"{prefix}remat_policy", self.remat_policy, tuple(REMAT_POLICIES) + (("auto",) if auto else ()))
        check_ranges(prefix, {"attention_chunks": (self.attention_chunks, *AT_LEAST_1),
                              "ffn_chunks": (self.ffn_chunks, *AT_LEAST_1)})
        try:  # ModelOptions checks the whole (and what it learns to check later)
            self.options(**({"remat_policy": "none"} if self.remat_policy == "auto" else {}))
        except ValueError as e:
            raise RecipeError(f"{prefix}{e}") from None


COMPUTE_FIELDS = tuple(f.name for f in dataclasses.fields(ComputeSection))


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

    def check(self, prefix: str = "parallel.") -> None:
        check_choice(f"{prefix}strategy", self.strategy, ("mesh", "pmap"))
        check_ranges(prefix, {
            "num_devices": (self.num_devices, *AT_LEAST_1),
            "num_processes": (self.num_processes, *AT_LEAST_1),
            "process_id": (self.process_id, lambda v: 0 <= v < (self.num_processes or 2**63),
                           f"in [0, parallel.num_processes {self.num_processes})" if self.num_processes else ">= 0")})
        address = self.coordinator_address
        if address is not None and address != "auto":
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise RecipeError(f"{prefix}coordinator_address: {address!r} is not HOST:PORT (a port in 1..65535) "
                                  f"or auto")
        if self.strategy == "pmap" and self.fsdp:
            raise RecipeError(f"{prefix}fsdp: FSDP needs parallel.strategy=mesh")


@dataclasses.dataclass
class CheckpointSection:
    every_steps: int = 1000
    keep: int = 3
    async_save: bool = True

    def check(self, prefix: str = "checkpoint.") -> None:
        check_ranges(prefix, {"every_steps": (self.every_steps, *AT_LEAST_1), "keep": (self.keep, *AT_LEAST_1)})


@dataclasses.dataclass
class RunRecipe:
    """What every recipe has beside its task's own sections: a name, the parallel layout, checkpoints.
    Pretraining's and fine-tuning's recipes extend it with their model, data, optim and train sections."""
    name: str = "custom"
    parallel: ParallelSection = dataclasses.field(default_factory=ParallelSection)
    checkpoint: CheckpointSection = dataclasses.field(default_factory=CheckpointSection)

    def to_dict(self) -> dict:
        """The recipe as a plain dict, as recipe.yaml shows it: name, the task's sections, then these."""
        whole = dataclasses.asdict(self)
        shared = ("parallel", "checkpoint")
        return {k: whole[k] for k in ("name", *(k for k in whole if k not in ("name", *shared)), *shared)}


def check_sections(recipe) -> None:
    """Every section of a recipe that checks itself, under its own key."""
    for f in dataclasses.fields(recipe):
        section = getattr(recipe, f.name)
        if hasattr(section, "check"):
            section.check(f"{f.name}.")


# ---- loading and checking --------------------------------------------------

# Keys that may say "auto": the loop plans them for its devices (jaxbert.plan.batch_search).
AUTO_KEYS = ("train.per_device_batch_size", "model.remat_policy")


SOURCE_NAME = re.compile(r"[A-Za-z0-9._-]+")  # a source's name: it keys the run's reports and metric keys


def read_source(cls, item, where: str, example: str, missing: str):
    """One item of a ``data.sources`` list (``where``: data.sources[k]) as ``cls(path, weight, name)``: a mapping
    of cls.KEYS (the path's key first), the path given (MISSING says what it is), a finite weight > 0 where
    given (an integer kept as written, anything else as the number it reads as: YAML reads 1e3 as a string),
    a name that can key the reports; RecipeError naming the key at fault."""
    if not isinstance(item, dict):
        raise RecipeError(f"{where}: {item!r} is not a mapping like {example}")
    path_key = cls.KEYS[0]
    unknown = sorted(set(item) - set(cls.KEYS))
    if unknown:
        raise RecipeError(f"{where}: unknown key {unknown[0]!r}; a source has {', '.join(cls.KEYS[:-1])} and "
                          f"{cls.KEYS[-1]}")
    path = item.get(path_key)
    if not isinstance(path, str) or not path:
        raise RecipeError(f"{where}.{path_key}: missing; a source is {missing}")
    weight = item.get("weight")
    if "weight" in item:
        number = None
        if not isinstance(weight, bool):
            try:
                number = read_number(weight, f"{where}.weight")
            except RecipeError:
                if isinstance(weight, int):  # beyond 64 bits: the reader's own words
                    raise
        if number is None or number <= 0:
            raise RecipeError(f"{where}.weight: must be a finite number > 0, got {weight!r}")
        if not isinstance(weight, int):
            weight = number  # the recipe holds (and records) the number; an integer stays as written
    source = cls(path, **({"weight": weight} if "weight" in item else {}), name=item.get("name"))
    if ("name" in item and not isinstance(source.name, str)) or not SOURCE_NAME.fullmatch(source.label):
        raise RecipeError(f"{where}.name: {item.get('name', source.label)!r} cannot key the run's reports "
                          "(tokens/NAME); give a name of letters, digits, '.', '_' or '-'")
    return source


def read_named(value, key: str, read_item, expected: str = "a list", empty: bool = True) -> Optional[tuple]:
    """A recipe's list of named items (``data.sources``), each read by ``read_item(item, "KEY[k]")`` and named
    apart from the others (its ``label``); None stays None, an empty list is refused unless EMPTY."""
    if value is None:
        return None
    if not isinstance(value, list) or (not value and not empty):
        raise RecipeError(f"{key}: expected {expected}, got {value!r}")
    items, names = [], {}
    for k, raw in enumerate(value):
        item = read_item(raw, f"{key}[{k}]")
        if item.label in names:
            raise RecipeError(f"{key}[{k}].name: {item.label!r} already names {key}[{names[item.label]}]; give "
                              "each source its own name")
        names[item.label] = k
        items.append(item)
    return tuple(items)


def shown_integer(value: int) -> str:
    """An integer as a message shows it: its digits, or how many there are when they would fill the line."""
    text = str(value)
    return text if len(text) <= 24 else f"an integer of {len(text.lstrip('-'))} digits"


def read_number(value: Any, key: str) -> float:
    """A recipe's number, read one way wherever a recipe holds one (typed fields and the numbers inside
    lists and mappings, such as data.sources[k].weight): an int within 64 bits, a float, or a string
    PyYAML left unread (YAML 1.1 reads ``1e-3``, without a dot, as a string), as a finite float.
    RecipeError naming key otherwise (true/false are not numbers)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not -2**63 < value < 2**63:
            raise RecipeError(f"{key}: {shown_integer(value)} is out of range (a 64-bit integer)")
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise RecipeError(f"{key}: expected a number, got {value!r}") from None
        value = number
    if not isinstance(value, float):
        raise RecipeError(f"{key}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise RecipeError(f"{key}: expected a finite number, got {value!r}")
    return value


def _check(value: Any, tp: Any, key: str, defaults: Optional[dict] = None) -> Any:
    """Returns value converted to type tp, or raises RecipeError naming key. defaults: a section's
    defaults that the recipe holding it sets over the section class's own."""
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
        return build(tp, value, key + ".", defaults)
    if tp is float:
        return read_number(value, key)
    expected = {int: "an integer", str: "a string", bool: "true or false", dict: "a mapping",
                list: "a list"}[origin or tp]
    ok = isinstance(value, origin or tp) and not (tp is int and isinstance(value, bool))
    if not ok:
        raise RecipeError(f"{key}: expected {expected}, got {value!r}")
    if tp is int and not -2**63 < value < 2**63:
        raise RecipeError(f"{key}: {shown_integer(value)} is out of range (a 64-bit integer)")
    return value


def build(cls, data: dict, prefix: str = "", defaults: Optional[dict] = None):
    """A recipe dataclass (or section) from a mapping: every key checked, RecipeError naming a bad one.

    A section class with a ``variant(data, prefix)`` classmethod names the class the mapping builds
    (the optimizer's own section, by optim.name); its ``RENAMED`` maps old keys to new ones, which a
    mapping may still use, with a DeprecationWarning; ``keys_owner()`` says whose keys an unknown one
    was checked against. A recipe field's ``metadata["defaults"]`` sets its section's defaults (those
    of its keys that the built class has); its ``metadata["read"]``, a function (value, key) -> value,
    reads a value the type alone does not describe (data.sources' list of typed sources)."""
    if hasattr(cls, "variant"):
        cls = cls.variant(data, prefix)
    data = _renamed(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            owner = f" for {cls.keys_owner()}" if hasattr(cls, "keys_owner") else ""
            raise RecipeError(f"{prefix}{key}: unknown key{owner}; expected one of {sorted(fields)}")
    kwargs = {k: v for k, v in (defaults or {}).items() if k in fields}
    kwargs.update({k: fields[k].metadata["read"](v, prefix + k) if "read" in fields[k].metadata else
                   _check(v, hints[k], prefix + k, fields[k].metadata.get("defaults")) for k, v in data.items()})
    return cls(**kwargs)


def _renamed(cls, data: dict, prefix: str) -> dict:
    """data with the keys cls.RENAMED maps moved to their new names, each with a DeprecationWarning."""
    renamed = getattr(cls, "RENAMED", {})
    if not any(old in data for old in renamed):
        return data
    data = dict(data)
    for old, new in renamed.items():
        if old in data:
            if new in data:
                raise RecipeError(f"{prefix}{old}: the old name of {prefix}{new}; give only {prefix}{new}")
            owner = f" of {cls.keys_owner()}" if hasattr(cls, "keys_owner") else ""
            warnings.warn(f"recipe key {prefix}{old}{owner} is now {prefix}{new} (same meaning); the old name "
                          f"goes in a later release", DeprecationWarning, stacklevel=3)
            data[new] = data.pop(old)
    return data


def from_dict(cls, data: dict, validate):
    """A recipe of class cls from a mapping: built, then ``validate(recipe)``."""
    if not isinstance(data, dict):
        raise RecipeError(f"a recipe is a mapping of sections, got {type(data).__name__}")
    recipe = build(cls, data)
    validate(recipe)
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


def load(cls, validate, name_or_path: str, overrides: list[str] = (), folder: str = "train"):
    """A recipe of class cls read from a file or a shipped name, overrides applied, checked;
    errors name the file."""
    path, data = read_yaml(name_or_path, overrides, folder)
    try:
        return from_dict(cls, data, validate)
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
