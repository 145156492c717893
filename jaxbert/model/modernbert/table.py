"""The key table between transformers' ModernBERT state dict and jaxbert's param tree: its modules as rows
(jaxbert.model.row_table: kinds, scanned layout). With scan_layers, layers 1..L-1 become ``layers/scan``
with a leading axis (layer i at index i - 1); layer 0 stays ``layers/0`` (it lacks attn_norm).
"""

from __future__ import annotations

from jaxbert.model.contract import LayerStack
from jaxbert.model.keys import Entry
from jaxbert.model.modernbert.config import CLASS_NAMES, ModernBertConfig
from jaxbert.model.modernbert.modules import SCAN
from jaxbert.model.row_table import Layout, RowTable, holds_scanned

PREFIX = "model"  # the encoder's name in the head classes
LAYOUT = Layout(prefix=PREFIX, base_class="ModernBertModel", mlm_class="ModernBertForMaskedLM", mlm_decoder="decoder",
                embedding="embeddings.tok_embeddings", base_modules=("embeddings.", "layers.", "final_norm."),
                stack=LayerStack("layers", SCAN, first=1))


def encoder_rows(c: ModernBertConfig) -> list:
    """(module path, kind, dims, layer index or None) of the bare encoder."""
    H, I = c.hidden_size, c.intermediate_size
    norm = "norm" if c.norm_bias else "norm_nobias"
    attn = "linear" if c.attention_bias else "linear_nobias"
    mlp = "linear" if c.mlp_bias else "linear_nobias"
    rows = [("embeddings.tok_embeddings", "embed", (c.vocab_size, H), None), ("embeddings.norm", norm, (H,), None)]
    for i in range(c.num_hidden_layers):
        layer = [] if i == 0 else [("attn_norm", norm, (H,))]  # layer 0's attn_norm is the identity
        layer += [("attn.Wqkv", attn, (H, 3 * H)), ("attn.Wo", attn, (H, H)), ("mlp_norm", norm, (H,)),
                  ("mlp.Wi", mlp, (H, 2 * I)), ("mlp.Wo", mlp, (I, H))]
        rows += [(f"layers.{i}.{m}", k, d, i) for m, k, d in layer]
    return rows + [("final_norm", norm, (H,), None)]


def head_rows(c: ModernBertConfig, class_name: str) -> list:
    """The rows of a class's head (not the encoder)."""
    H = c.hidden_size
    if class_name == "ModernBertModel":
        return []
    rows = [("head.dense", "linear" if c.classifier_bias else "linear_nobias", (H, H), None),
            ("head.norm", "norm" if c.norm_bias else "norm_nobias", (H,), None)]
    if class_name == "ModernBertForMaskedLM":
        if c.tie_word_embeddings:
            return rows + ([("decoder", "bias", (c.vocab_size,), None)] if c.decoder_bias else [])
        return rows + [("decoder", "linear" if c.decoder_bias else "linear_nobias", (H, c.vocab_size), None)]
    labels = 1 if class_name == "ModernBertForMultipleChoice" else c.num_labels
    return rows + [("classifier", "linear", (H, labels), None)]


class Table(RowTable):
    """Every tensor of one ModernBERT class under one config and layout (entries, by_key, aliases, leaf_shapes,
    prefix, spec); aliases: decoder.weight when the config ties it to tok_embeddings."""

    def __init__(self, config: ModernBertConfig, model_class: str, scan_layers: bool = False,
                 add_pooling_layer=None):
        config.class_name(model_class)
        super().__init__(LAYOUT, config, model_class, encoder_rows(config), head_rows(config, model_class), scan_layers)


def is_scanned(params) -> bool:
    """Whether a ModernBERT param tree holds the scanned layout (a layers/scan stack)."""
    return holds_scanned(LAYOUT, params)


def param_count(config: ModernBertConfig, class_name: str) -> int:
    """The number of parameters of a class, from the table (no array is made)."""
    return Table(config, class_name).param_count()


def mlm_rows(config) -> list:
    """The MLM head's param rows (its family entry's mlm_rows)."""
    return head_rows(config, "ModernBertForMaskedLM")


def family_table(config, model_class, scan_layers=False, add_pooling_layer=None) -> Table:
    """The key table as the family registry calls it (ModernBERT has no pooler to add)."""
    return Table(config, model_class, scan_layers)


__all__ = ["CLASS_NAMES", "Entry", "Table", "encoder_rows", "family_table", "head_rows", "is_scanned", "mlm_rows",
           "param_count"]
