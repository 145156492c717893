"""EuroBERT (Boizard et al. 2025; transformers 5's EuroBert classes) as a jaxbert family: its config, its four
classes, and the key table the converter dispatches to.

    config = EuroBertConfig.from_json_file("config.json")
    module = build("EuroBertForMaskedLM", config, ModelOptions(scan_layers=True))
    table = Table(config, "EuroBertForMaskedLM", scan_layers=True)  # state-dict key <-> param path

The rest of jaxbert reaches these through the family registry (jaxbert.model.families.eurobert).
"""

from __future__ import annotations

from jaxbert.model.eurobert.config import CLASS_NAMES, MODEL_TYPE, EuroBertConfig
from jaxbert.model.eurobert.heads import MODEL_CLASSES
from jaxbert.model.eurobert.table import Table, is_scanned, param_count
from jaxbert.model.options import ModelOptions
from jaxbert.model.own_classes import build_class, class_of_checkpoint


def build(class_name: str, config: EuroBertConfig, options: ModelOptions = ModelOptions(), **kwargs):
    """The module of a EuroBERT class name for this config and these options (its classes take no other
    keywords); options it cannot honour are refused by name."""
    return build_class("EuroBERT", MODEL_CLASSES, EuroBertConfig, MODEL_TYPE, class_name, config, options, kwargs)


def infer_class(config: EuroBertConfig, keys: list) -> str | None:
    """A EuroBERT checkpoint's class: its architectures entry, else what its head keys say (a classifier
    with a dense before it is sequence classification, alone token classification); None when
    architectures names only classes EuroBERT does not have."""
    return class_of_checkpoint(config, keys, CLASS_NAMES, (
        (("lm_head",), "EuroBertForMaskedLM"), (("classifier", "dense"), "EuroBertForSequenceClassification"),
        (("classifier",), "EuroBertForTokenClassification")), "EuroBertModel")


def non_embedding_params(config: EuroBertConfig) -> int:
    """Matmul weights of the layers, for the FLOP count: q_proj and o_proj (2 H N D), k_proj and v_proj
    (2 H K D) and SwiGLU's three (3 H I)."""
    H, I, D = config.hidden_size, config.intermediate_size, config.head_dim
    N, K = config.num_attention_heads, config.num_key_value_heads
    return config.num_hidden_layers * (2 * H * N * D + 2 * H * K * D + 3 * H * I)


def attended_positions(config: EuroBertConfig, seq_len: int) -> int:
    """Keys a query attends, summed over the layers: every key on every layer (the FLOP count's
    attention-score term)."""
    return config.num_hidden_layers * seq_len


__all__ = ["CLASS_NAMES", "MODEL_CLASSES", "MODEL_TYPE", "EuroBertConfig", "Table", "build", "infer_class",
           "attended_positions", "is_scanned", "non_embedding_params", "param_count"]
