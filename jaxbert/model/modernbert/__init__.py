"""ModernBERT (and the checkpoints that load through its classes: mmBERT, Ettin's encoders) as a
jaxbert family: its config, its six classes, and the key table the converter dispatches to.

    config = ModernBertConfig.from_json_file("config.json")
    module = build("ModernBertForMaskedLM", config, ModelOptions(scan_layers=True))
    table = Table(config, "ModernBertForMaskedLM", scan_layers=True)  # state-dict key <-> param path

The rest of jaxbert reaches these through the family registry (jaxbert.model.families.modernbert).
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxbert.model.modernbert.config import CLASS_NAMES, FULL, MODEL_TYPE, SLIDING, ModernBertConfig
from jaxbert.model.modernbert.heads import MODEL_CLASSES
from jaxbert.model.modernbert.table import Table, is_scanned, param_count
from jaxbert.model.options import ModelOptions
from jaxbert.model.own_classes import build_class, class_of_checkpoint


def build(class_name: str, config: ModernBertConfig, options: ModelOptions = ModelOptions(), **kwargs):
    """The module of a ModernBERT class name for this config and these options (its classes take no
    other keywords: ``add_pooling_layer`` is refused, as ModernBERT has no pooler)."""
    return build_class("ModernBERT", MODEL_CLASSES, ModernBertConfig, MODEL_TYPE, class_name, config, options, kwargs)


def dummy_inputs(class_name: str, batch: int = 1, length: int = 8) -> tuple:
    """(input_ids, token_type_ids) shaped for init; multiple choice takes [B, C, T]."""
    shape = (batch, 2, length) if class_name == "ModernBertForMultipleChoice" else (batch, length)
    return jnp.zeros(shape, jnp.int32), jnp.zeros(shape, jnp.int32)


def infer_class(config: ModernBertConfig, keys: list) -> str | None:
    """A ModernBERT checkpoint's class: its architectures entry, else what its head keys say
    (a classifier is taken for sequence classification, the commonest); None when architectures
    names only classes ModernBERT does not have."""
    return class_of_checkpoint(config, keys, CLASS_NAMES, ((("decoder",), "ModernBertForMaskedLM"),
                                                           (("classifier",), "ModernBertForSequenceClassification")),
                               "ModernBertModel")


def non_embedding_params(config: ModernBertConfig) -> int:
    """Matmul weights of the layers, for the FLOP count: Wqkv + Wo (4 H^2) and GeGLU's Wi + Wo (3 H I)."""
    H, I = config.hidden_size, config.intermediate_size
    return config.num_hidden_layers * (4 * H * H + 3 * H * I)


def attended_positions(config: ModernBertConfig, seq_len: int) -> int:
    """Keys a query attends, summed over the layers: T on a global layer, at most the window's
    2 * half_window + 1 on a sliding one (the FLOP count's attention-score term)."""
    local = min(seq_len, 2 * config.half_window + 1) if SLIDING in config.layer_kinds else seq_len
    return sum(seq_len if kind == FULL else local for kind in config.layer_kinds)


__all__ = ["CLASS_NAMES", "MODEL_CLASSES", "MODEL_TYPE", "ModernBertConfig", "Table", "build", "dummy_inputs",
           "infer_class", "attended_positions", "is_scanned", "non_embedding_params", "param_count"]
