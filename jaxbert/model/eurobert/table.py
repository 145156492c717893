"""The key table between transformers' EuroBERT state dict and jaxbert's param tree: its modules as rows
(jaxbert.model.row_table: kinds, scanned layout; its RMSNorms are norms without bias). With scan_layers,
``layers.{i}`` becomes ``layers`` with a leading axis (layer i at index i), as BERT's encoder.layer.
"""

from __future__ import annotations

from jaxbert.model.eurobert.config import CLASS_NAMES, EuroBertConfig
from jaxbert.model.contract import LayerStack
from jaxbert.model.keys import Entry
from jaxbert.model.row_table import Layout, RowTable, holds_scanned

PREFIX = "model"  # the encoder's name in the head classes
MLM = "EuroBertForMaskedLM"
LAYOUT = Layout(prefix=PREFIX, base_class="EuroBertModel", mlm_class=MLM, mlm_decoder="lm_head",
                embedding="embed_tokens", base_modules=("embed_tokens.", "layers.", "norm."),
                stack=LayerStack("layers"))


def encoder_rows(c: EuroBertConfig) -> list:
    """(module path, kind, dims, layer index or None) of the bare encoder."""
    H, I, D = c.hidden_size, c.intermediate_size, c.head_dim
    q, kv = c.num_attention_heads * D, c.num_key_value_heads * D
    attn = "linear" if c.attention_bias else "linear_nobias"
    mlp = "linear" if c.mlp_bias else "linear_nobias"
    layer = [("input_layernorm", "norm_nobias", (H,)), ("self_attn.q_proj", attn, (H, q)), ("self_attn.k_proj", attn, (H, kv)),
             ("self_attn.v_proj", attn, (H, kv)), ("self_attn.o_proj", attn, (q, H)),
             ("post_attention_layernorm", "norm_nobias", (H,)), ("mlp.gate_proj", mlp, (H, I)), ("mlp.up_proj", mlp, (H, I)),
             ("mlp.down_proj", mlp, (I, H))]
    rows = [("embed_tokens", "embed", (c.vocab_size, H), None)]
    rows += [(f"layers.{i}.{m}", k, d, i) for i in range(c.num_hidden_layers) for m, k, d in layer]
    return rows + [("norm", "norm_nobias", (H,), None)]


def head_rows(c: EuroBertConfig, class_name: str) -> list:
    """The rows of a class's head (not the encoder)."""
    H = c.hidden_size
    if class_name == MLM:
        if c.tie_word_embeddings:
            return [("lm_head", "bias", (c.vocab_size,), None)] if c.mlp_bias else []
        return [("lm_head", "linear" if c.mlp_bias else "linear_nobias", (H, c.vocab_size), None)]
    if class_name == "EuroBertForSequenceClassification":
        return [("dense", "linear", (H, H), None), ("classifier", "linear", (H, c.num_labels), None)]
    if class_name == "EuroBertForTokenClassification":
        return [("classifier", "linear", (H, c.num_labels), None)]
    return []


class Table(RowTable):
    """Every tensor of one EuroBERT class under one config and layout (entries, by_key, aliases, leaf_shapes,
    prefix, spec); aliases: lm_head.weight when the config ties it to embed_tokens."""

    def __init__(self, config: EuroBertConfig, model_class: str, scan_layers: bool = False, add_pooling_layer=None):
        config.class_name(model_class)
        super().__init__(LAYOUT, config, model_class, encoder_rows(config), head_rows(config, model_class), scan_layers)


def is_scanned(params) -> bool:
    """Whether a EuroBERT param tree holds the scanned layout (``layers`` holds leaves, not layers 0, 1, ...)."""
    return holds_scanned(LAYOUT, params)


def param_count(config: EuroBertConfig, class_name: str) -> int:
    """The number of parameters of a class, from the table (no array is made)."""
    return Table(config, class_name).param_count()


def mlm_rows(config) -> list:
    """The MLM head's param rows (its family entry's mlm_rows)."""
    return head_rows(config, MLM)


def family_table(config, model_class, scan_layers=False, add_pooling_layer=None) -> Table:
    """The key table as the family registry calls it (EuroBERT has no pooler to add)."""
    return Table(config, model_class, scan_layers)


__all__ = ["CLASS_NAMES", "Entry", "Table", "encoder_rows", "family_table", "head_rows", "is_scanned", "mlm_rows",
           "param_count"]
