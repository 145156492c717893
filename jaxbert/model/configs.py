"""Reading any family's config: the config class a config.json's model_type names (its family's), a recipe's
model config, the shipped presets, and each family's position limit. Loads no jax."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from jaxbert import fs
from jaxbert.errors import ConfigError
from jaxbert.model.bert.config import PRESETS, preset  # the shipped presets, BERT configs, by name
from jaxbert.model.families import BY_MODEL_TYPE, config_classes, family_of, supported

# A config.json without a model_type (BERT's original bert_config.json) is a BERT config.
DEFAULT_MODEL_TYPE = "bert"


def _config_class(model_type):
    """The config class of a model type's family; the default family's for one no family has (whose
    from_dict refuses it, naming the registered ones)."""
    family = BY_MODEL_TYPE.get(model_type if isinstance(model_type, str) else DEFAULT_MODEL_TYPE)
    return (family or BY_MODEL_TYPE[DEFAULT_MODEL_TYPE]).config_class



def position_limit(config) -> int:
    """The longest sequence a config's model takes (its family's position_limit)."""
    return family_of(config).position_limit(config)


def read_config_dict(data: Mapping[str, Any]):
    """A config.json's contents -> the config class its model_type's family reads (the default family's, BertConfig, where it names none)."""
    return _config_class(data.get("model_type", DEFAULT_MODEL_TYPE)).from_dict(data)


def read_config(path):
    """A config.json (or the directory holding one) -> its family's config class (the default family's, BertConfig, where it names none)."""
    path = fs.as_path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        model_type = None  # the default family's from_json_file reports what is wrong with the file
    return _config_class(model_type).from_json_file(path)


def build_config(preset_or_path: str, overrides: Mapping[str, Any], vocab_size: int | None = None,
                 model_class: str | None = None):
    """A recipe's model config: a preset name, a config.json (or its directory), or the model_type of
    a family with a config class of its own ("modernbert": that class's defaults, which are the
    family's base model); then ``overrides`` (fields of the family's config class; a
    ``model_type`` there picks the family), then ``vocab_size`` unless the overrides set it, and
    ``architectures`` = [model_class]. Raises ConfigError naming a field the class does not have."""
    default = _config_class(DEFAULT_MODEL_TYPE)
    base_type = preset_or_path if isinstance(preset_or_path, str) else None
    if base_type in BY_MODEL_TYPE and BY_MODEL_TYPE[base_type].config_class is not default:
        data = {"model_type": base_type}
    elif str(preset_or_path) in PRESETS:
        data = preset(str(preset_or_path)).to_dict()
    else:
        data = read_config(preset_or_path).to_dict()
    model_type = overrides.get("model_type", data.get("model_type", DEFAULT_MODEL_TYPE))
    if model_type not in BY_MODEL_TYPE:
        raise ConfigError(f"model_type {model_type!r} is not supported; jaxbert builds {supported()}")
    config_class = BY_MODEL_TYPE[model_type].config_class
    if data.get("model_type", DEFAULT_MODEL_TYPE) != model_type and config_class is not default:
        data = {"model_type": model_type}  # another family's preset says nothing of this one's config
    known = {f.name for f in dataclasses.fields(config_class)} - {"extra"}
    for key in overrides:
        if key not in known:
            raise ConfigError(f"{key}: not a {config_class.__name__} field")
    data = dict(data, **overrides)
    if vocab_size is not None and "vocab_size" not in overrides:
        data["vocab_size"] = vocab_size
    if model_class is not None:
        data["architectures"] = [model_class]
    return config_class.from_dict(data)


__all__ = ["ConfigError", "DEFAULT_MODEL_TYPE", "PRESETS", "build_config", "config_classes", "position_limit", "preset",
           "read_config", "read_config_dict"]
