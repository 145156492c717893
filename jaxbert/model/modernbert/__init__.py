"""ModernBERT (and the checkpoints that load through its classes: mmBERT, Ettin's encoders) as a
jaxbert family: its config, its six classes, and the key table the converter dispatches to.

    config = ModernBertConfig.from_json_file("config.json")
    module = build("ModernBertForMaskedLM", config, ModelOptions(scan_layers=True))
    table = Table(config, "ModernBertForMaskedLM", scan_layers=True)  # state-dict key <-> param path

The converter (jaxbert.convert.table.table_for) dispatches to ``Table`` by model_type.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxbert.model.modernbert.config import CLASS_NAMES, MODEL_TYPE, ModernBertConfig
from jaxbert.model.modernbert.heads import MODEL_CLASSES
from jaxbert.model.modernbert.table import Table, param_count
from jaxbert.model.options import ModelOptions


def build(class_name: str, config: ModernBertConfig, options: ModelOptions = ModelOptions()):
    """The module of a ModernBERT class name for this config and these options."""
    if class_name not in MODEL_CLASSES:
        raise ValueError(f"model class {class_name!r} is not a ModernBERT class; expected one of {CLASS_NAMES}")
    if not isinstance(config, ModernBertConfig):
        raise ValueError(f"{class_name} needs a ModernBertConfig (model_type 'modernbert'), "
                         f"got {type(config).__name__} with model_type {getattr(config, 'model_type', None)!r}")
    if options.decode:
        raise ValueError("decode=True: ModernBERT is an encoder; it has no key/value cache to decode with")
    return MODEL_CLASSES[class_name](config, options)


def dummy_inputs(class_name: str, batch: int = 1, length: int = 8) -> tuple:
    """(input_ids, token_type_ids) shaped for init; multiple choice takes [B, C, T]."""
    shape = (batch, 2, length) if class_name == "ModernBertForMultipleChoice" else (batch, length)
    return jnp.zeros(shape, jnp.int32), jnp.zeros(shape, jnp.int32)


def is_modernbert(config) -> bool:
    return getattr(config, "model_type", None) == MODEL_TYPE


__all__ = ["CLASS_NAMES", "MODEL_CLASSES", "MODEL_TYPE", "ModernBertConfig", "Table", "build", "dummy_inputs",
           "is_modernbert", "param_count"]
