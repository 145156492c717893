"""The key table between transformers' EuroBERT state dict and jaxbert's param tree.

One row per PyTorch module: its state-dict path and kind (the conventions of BERT's table,
jaxbert.model.table; the converter reads both through the same interface):

    Linear.weight [out, in]   <-> kernel [in, out] (transposed)    Linear.bias  <-> bias
    RMSNorm.weight            <-> scale                            Embedding.weight [V, H] <-> embedding

The Flax path is the module path split on dots; with scan_layers, ``layers.{i}`` becomes ``layers``
with a leading axis (layer i at index i), as BERT's encoder.layer.
"""

from __future__ import annotations

import dataclasses
import math

from jaxbert.model.eurobert.config import CLASS_NAMES, EuroBertConfig
from jaxbert.model.keys import COPY, TRANSPOSE, Entry

PREFIX = "model"  # the encoder's name in the head classes
MLM = "EuroBertForMaskedLM"

# kind -> ((torch leaf, flax leaf, transform), ...); the dims of a row give the Flax shape
_LEAVES = {"linear": (("weight", "kernel", TRANSPOSE), ("bias", "bias", COPY)),
           "linear_nobias": (("weight", "kernel", TRANSPOSE),),
           "norm": (("weight", "scale", COPY),),
           "embed": (("weight", "embedding", COPY),),
           "bias": (("bias", "bias", COPY),)}


def _shapes(kind: str, dims: tuple) -> tuple:
    """The Flax shape of each of a kind's leaves: a bias is the last dim, the rest the dims themselves."""
    return tuple((dims[-1],) if flax == "bias" else dims for _, flax, _ in _LEAVES[kind])


def encoder_rows(c: EuroBertConfig) -> list:
    """(module path, kind, dims, layer index or None) of the bare encoder."""
    H, I, D = c.hidden_size, c.intermediate_size, c.head_dim
    q, kv = c.num_attention_heads * D, c.num_key_value_heads * D
    attn = "linear" if c.attention_bias else "linear_nobias"
    mlp = "linear" if c.mlp_bias else "linear_nobias"
    layer = [("input_layernorm", "norm", (H,)), ("self_attn.q_proj", attn, (H, q)), ("self_attn.k_proj", attn, (H, kv)),
             ("self_attn.v_proj", attn, (H, kv)), ("self_attn.o_proj", attn, (q, H)),
             ("post_attention_layernorm", "norm", (H,)), ("mlp.gate_proj", mlp, (H, I)), ("mlp.up_proj", mlp, (H, I)),
             ("mlp.down_proj", mlp, (I, H))]
    rows = [("embed_tokens", "embed", (c.vocab_size, H), None)]
    rows += [(f"layers.{i}.{m}", k, d, i) for i in range(c.num_hidden_layers) for m, k, d in layer]
    return rows + [("norm", "norm", (H,), None)]


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


@dataclasses.dataclass(frozen=True)
class _Family:
    """What the converter's key matching reads of a family (as jaxbert.model.registry.Family)."""

    prefix: str = PREFIX
    mlm_decoder: str = "lm_head"


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    family: _Family = _Family()
    base: bool = False
    pooler: bool = False


class Table:
    """Every tensor of one EuroBERT class under one config and layout; the interface of
    jaxbert.model.table.Table (entries, by_key, aliases, leaf_shapes, prefix, spec).

    Attributes:
      entries: one Entry per tensor (per layer when scanned).
      prefix: "model." for the head classes, "" for EuroBertModel.
      aliases: tied state-dict keys -> the key whose tensor they equal (lm_head.weight when tied).
      base_modules: the encoder's top-level modules, for a bare-encoder checkpoint into a head class.
      leaf_shapes: param path -> full leaf shape (with the stacked axis when scanned).
    """

    base_modules = ("embed_tokens.", "layers.", "norm.")

    def __init__(self, config: EuroBertConfig, model_class: str, scan_layers: bool = False, add_pooling_layer=None):
        config.class_name(model_class)
        self.config, self.model_class, self.scan_layers = config, model_class, scan_layers
        base = model_class == "EuroBertModel"
        self.spec = _Spec(model_class, base=base)
        self.prefix = "" if base else PREFIX + "."
        rows = [(self.prefix + m, k, d, i) for m, k, d, i in encoder_rows(config)] + head_rows(config, model_class)
        self.entries = [e for row in rows for e in self._expand(*row)]
        self.by_key = {e.key: e for e in self.entries}
        self.aliases = {}
        if model_class == MLM and config.tie_word_embeddings:
            self.aliases["lm_head.weight"] = f"{PREFIX}.embed_tokens.weight"
        L = config.num_hidden_layers
        self.leaf_shapes = {e.path: ((L,) + e.shape if e.layer is not None else e.shape) for e in self.entries}

    def _expand(self, module: str, kind: str, dims: tuple, layer: int | None):
        path = tuple(module.split("."))
        scanned = self.scan_layers and layer is not None
        if scanned:  # ...layers.{i}.x -> ...layers/x, index i
            at = path.index("layers")
            path = path[:at + 1] + path[at + 2:]
        for (torch_leaf, flax_leaf, transform), shape in zip(_LEAVES[kind], _shapes(kind, dims)):
            yield Entry(f"{module}.{torch_leaf}", path + (flax_leaf,), transform, shape, layer if scanned else None)

    def leaf_bytes(self, itemsize: int) -> int:
        return sum(math.prod(s) for s in self.leaf_shapes.values()) * itemsize


def is_scanned(params) -> bool:
    """Whether a EuroBERT param tree holds the scanned layout (``layers`` holds leaves, not layers 0, 1, ...)."""
    tree = params.get("params", params)
    layers = tree.get(PREFIX, tree).get("layers", {})
    return bool(layers) and not all(str(k).isdigit() for k in layers)


def param_count(config: EuroBertConfig, class_name: str) -> int:
    """The number of parameters of a class, from the table (no array is made)."""
    return sum(math.prod(e.shape) for e in Table(config, class_name).entries)


def mlm_rows(config) -> list:
    """The MLM head's param rows (its family entry's mlm_rows)."""
    return head_rows(config, MLM)


def family_table(config, model_class, scan_layers=False, add_pooling_layer=None) -> Table:
    """The key table as the family registry calls it (EuroBERT has no pooler to add)."""
    return Table(config, model_class, scan_layers)


__all__ = ["CLASS_NAMES", "Entry", "Table", "encoder_rows", "family_table", "head_rows", "is_scanned", "mlm_rows",
           "param_count"]
