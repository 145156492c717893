"""What every family's config shares: a Hugging Face config.json as a frozen dataclass.

``HFConfig`` reads and writes transformers' ``config.json`` (keys a family does not model are kept
in ``extra``, so a round trip loses nothing), checks each field's JSON type, derives the labels
(``num_labels`` <-> ``id2label`` / ``label2id``) as transformers does, and hashes by content.
A family's config (BertConfig, ModernBertConfig) is an ``@hf_config`` dataclass on it that adds
its fields, its checks and its derived values. Config is data: nothing here imports jax.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

from jaxbert import fs
from jaxbert.errors import ConfigError
from jaxbert.fs import atomic_write_text

# The hidden_act names a config may give, in transformers' order (the keys of ACT_FNS);
# jaxbert.model.activations has a function for each.
ACTIVATIONS = (
    "gelu", "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_fast",
    "quick_gelu", "relu", "silu", "swish", "tanh", "mish", "linear",
)
_TYPE_NAMES = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string",
               Mapping: "a JSON object", list: "a JSON list"}


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_CHECKS = {int: is_int, float: is_number, bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str),
           Mapping: lambda v: isinstance(v, Mapping), list: lambda v: isinstance(v, (list, tuple))}


def hf_config(cls):
    """The frozen dataclass of a family's config, hashing by its config.json (a module holds its
    config and may be a jit static argument; its dict fields would not hash otherwise)."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls.__hash__ = HFConfig.__hash__
    return cls


class HFConfig:
    """The shared half of a family's config; subclasses are ``@hf_config`` dataclasses with the fields
    ``num_labels``, ``id2label``, ``label2id``, ``model_type`` and ``extra``, and say:

      FIELD_TYPES: field -> its JSON type (int, float, bool, str, Mapping, list), checked before use.
      OPTIONAL: fields that may be null.
      DEFAULT_MODEL_TYPE: the model_type a config.json without one has.

    A family with modules of its own (one model_type, its own class names) also says:

      CLASS_NAMES: the classes a config of it may name (``class_name``, ``architectures``).
      A_NAME: the family in messages, with its article ("an ELECTRA", "a EuroBERT").
    and gets the model_type check of ``from_dict`` and ``validate``, ``class_name`` and the
    ``architectures`` check from here; BERT's config, read by several model_types, says its own.
    """

    FIELD_TYPES: Mapping[str, type] = {}
    OPTIONAL: frozenset = frozenset()
    DEFAULT_MODEL_TYPE = ""
    CLASS_NAMES: tuple = ()
    A_NAME = ""
    OWN_CLASSES: tuple = ()  # jaxbert's classes that no transformers version has (DeBERTa-v3's discriminator)

    # ---- one model_type, its own classes ------------------------------------------
    @classmethod
    def check_model_type(cls, model_type) -> None:
        """Refuses a model_type other than the family's, naming both."""
        if model_type != cls.DEFAULT_MODEL_TYPE:
            raise ConfigError(f"model_type {model_type!r} is not {cls.A_NAME} config "
                              f"(expected {cls.DEFAULT_MODEL_TYPE!r})")

    def known_class(self, name: str) -> bool:
        """Whether ``architectures`` may name NAME (a family may accept more than it builds)."""
        return name in self.CLASS_NAMES

    def _check_architectures(self) -> None:
        for name in getattr(self, "architectures", None) or ():
            if not self.known_class(name):
                raise ConfigError(f"architectures names {name!r}, not {self.A_NAME} class "
                                  f"jaxbert builds {self.CLASS_NAMES}")

    def class_name(self, name: str) -> str:
        """The name itself when it is one of the family's classes; refused by name otherwise."""
        if name not in self.CLASS_NAMES:
            raise ConfigError(f"model_type {self.model_type!r} has no class {name!r}; its classes are "
                              f"{self.CLASS_NAMES}")
        return name

    def _init_fields(self) -> None:
        """Types and labels (``_init_labels``), then ``architectures`` as a tuple (the config hashes)."""
        self._init_labels()
        if getattr(self, "architectures", None) is not None:
            object.__setattr__(self, "architectures", tuple(self.architectures))

    def _check_family(self) -> None:
        """The model_type, the architectures and the labels: every own-module family's last checks."""
        self.check_model_type(self.model_type)
        self._check_architectures()
        self._check_labels()

    def _init_labels(self) -> None:
        """Types checked, then the labels as transformers derives them: num_labels from id2label when
        that is given, else LABEL_0 .. LABEL_{n-1}; a label2id that disagrees is rebuilt."""
        self._check_types()
        id2label = self.id2label
        if id2label is None:
            id2label = {i: f"LABEL_{i}" for i in range(2 if self.num_labels is None else self.num_labels)}
        id2label = {int(k): str(v) for k, v in id2label.items()}
        label2id = {str(k): int(v) for k, v in (self.label2id or {}).items()}
        if set(label2id) != set(id2label.values()):  # missing, or left over from other labels
            label2id = {v: k for k, v in id2label.items()}
        object.__setattr__(self, "id2label", id2label)
        object.__setattr__(self, "label2id", label2id)
        object.__setattr__(self, "num_labels", len(id2label))
        object.__setattr__(self, "extra", dict(self.extra))

    def _check_types(self) -> None:
        """Each field's JSON type, before anything uses it: "false" is not a bool, "12" not an int."""
        for name, kind in self.FIELD_TYPES.items():
            value = getattr(self, name)
            if value is None and name in self.OPTIONAL:
                continue
            if not _CHECKS[kind](value):
                raise ConfigError(f"{name} must be {_TYPE_NAMES[kind]}, got {value!r}")
        if isinstance(self.id2label, Mapping):
            for k in self.id2label:
                if not is_int(k) and not (isinstance(k, str) and k.lstrip("-").isdigit()):
                    raise ConfigError(f"id2label keys must be integers, got {k!r}")
        if isinstance(self.label2id, Mapping):
            for v in self.label2id.values():
                if not is_int(v):
                    raise ConfigError(f"label2id values must be integers, got {v!r}")

    def _check_labels(self) -> None:
        if self.num_labels <= 0:
            raise ConfigError(f"num_labels must be a positive integer, got {self.num_labels!r}")

    def __hash__(self):
        return hash(json.dumps(self.to_dict(), sort_keys=True, default=str))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def replace(self, **changes):
        if "num_labels" in changes and "id2label" not in changes:
            changes.update(id2label=None, label2id=None)  # relabel LABEL_0 .. LABEL_{n-1}
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> set:
        """The config.json keys it models (the rest go to ``extra``)."""
        return {f.name for f in dataclasses.fields(cls)} - {"extra"}

    # ---- config.json -------------------------------------------------------
    @classmethod
    def _split(cls, data: Mapping[str, Any]) -> tuple[dict, dict]:
        """config.json -> (the fields' values, every other key for ``extra``); id2label decides num_labels."""
        known = cls.field_names()
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        if kwargs.get("id2label") is not None:
            kwargs["num_labels"] = None
        return kwargs, extra

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        """A config.json's contents; a family with its own classes first checks the model_type it names."""
        if cls.CLASS_NAMES:
            cls.check_model_type(data.get("model_type", cls.DEFAULT_MODEL_TYPE))
        kwargs, extra = cls._split(data)
        return cls(**kwargs, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """config.json: every key that came in, then the fields (num_labels left to id2label, as transformers does)."""
        out = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.name in ("extra", "num_labels"):
                continue
            value = getattr(self, f.name)
            if f.name == "id2label":
                value = {str(k): v for k, v in value.items()}
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json_file(cls, path: str | Path):
        path = fs.as_path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"cannot read config {path}: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} is not a JSON object")
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from e

    def to_json_file(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
