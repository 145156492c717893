"""The key table between transformers' ModernBERT state dict and jaxbert's param tree.

One row per PyTorch module: its state-dict path and kind. The kind says which tensors the
module holds and how each maps (the conventions of BERT's table, jaxbert.model.table; the
converter's loader and writers read both through the same interface):

    Linear.weight [out, in]   <-> kernel [in, out] (transposed)    Linear.bias     <-> bias
    LayerNorm.weight          <-> scale                            LayerNorm.bias  <-> bias
    Embedding.weight [V, H]   <-> embedding [V, H]

The Flax path is the module path split on dots; with scan_layers, layers 1..L-1 become
``layers/scan`` with a leading axis (layer i at index i - 1); layer 0 stays ``layers/0``.
"""

from __future__ import annotations

import dataclasses
import math

from jaxbert.model.keys import COPY, TRANSPOSE, Entry
from jaxbert.model.modernbert.config import CLASS_NAMES, ModernBertConfig
from jaxbert.model.modernbert.modules import SCAN

PREFIX = "model"  # the encoder's name in the head classes


def _leaves(kind: str, dims: tuple) -> tuple:
    """(torch leaf, flax leaf, transform, flax shape) of one module kind."""
    if kind in ("linear", "linear_nobias"):
        i, o = dims
        out = (("weight", "kernel", TRANSPOSE, (i, o)),)
        return out + ((("bias", "bias", COPY, (o,)),) if kind == "linear" else ())
    if kind in ("norm", "norm_nobias"):
        out = (("weight", "scale", COPY, dims),)
        return out + ((("bias", "bias", COPY, dims),) if kind == "norm" else ())
    if kind == "embed":
        return (("weight", "embedding", COPY, dims),)
    if kind == "bias":
        return (("bias", "bias", COPY, dims),)
    raise ValueError(f"unknown module kind {kind!r}")


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


@dataclasses.dataclass(frozen=True)
class _Family:
    """What the converter's key matching reads of a family (as jaxbert.model.registry.Family)."""

    prefix: str = PREFIX
    mlm_decoder: str = "decoder"


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    family: _Family = _Family()
    base: bool = False
    pooler: bool = False


class Table:
    """Every tensor of one ModernBERT class under one config and layout; the interface of
    jaxbert.model.table.Table (entries, by_key, aliases, leaf_shapes, prefix, spec).

    Attributes:
      entries: one Entry per tensor (per layer when scanned).
      prefix: "model." for the head classes, "" for ModernBertModel.
      aliases: tied state-dict keys -> the key whose tensor they equal (decoder.weight).
      base_modules: the encoder's top-level modules, for a bare-encoder checkpoint into a head class.
      leaf_shapes: param path -> full leaf shape (with the stacked axis when scanned).
    """

    base_modules = ("embeddings.", "layers.", "final_norm.")

    def __init__(self, config: ModernBertConfig, model_class: str, scan_layers: bool = False,
                 add_pooling_layer=None):
        config.class_name(model_class)
        self.config, self.model_class, self.scan_layers = config, model_class, scan_layers
        base = model_class == "ModernBertModel"
        self.spec = _Spec(model_class, base=base)
        self.prefix = "" if base else PREFIX + "."
        rows = [(self.prefix + m, k, d, i) for m, k, d, i in encoder_rows(config)] + head_rows(config, model_class)
        self.entries = [e for row in rows for e in self._expand(*row)]
        self.by_key = {e.key: e for e in self.entries}
        self.aliases = {}
        if model_class == "ModernBertForMaskedLM" and config.tie_word_embeddings:
            self.aliases["decoder.weight"] = f"{PREFIX}.embeddings.tok_embeddings.weight"
        stacked = config.num_hidden_layers - 1
        self.leaf_shapes = {e.path: ((stacked,) + e.shape if e.layer is not None else e.shape) for e in self.entries}

    def _expand(self, module: str, kind: str, dims: tuple, layer: int | None):
        path = tuple(module.split("."))
        scanned = self.scan_layers and layer is not None and layer > 0
        if scanned:  # ...layers.{i}.x -> ...layers/scan/x, index i - 1
            at = path.index("layers")
            path = path[:at + 1] + (SCAN,) + path[at + 2:]
        for torch_leaf, flax_leaf, transform, shape in _leaves(kind, dims):
            yield Entry(f"{module}.{torch_leaf}", path + (flax_leaf,), transform, shape,
                        layer - 1 if scanned else None)

    def leaf_bytes(self, itemsize: int) -> int:
        return sum(math.prod(s) for s in self.leaf_shapes.values()) * itemsize


def is_scanned(params) -> bool:
    """Whether a ModernBERT param tree holds the scanned layout (a layers/scan stack)."""
    tree = params.get("params", params)
    tree = tree.get(PREFIX, tree)
    return SCAN in tree.get("layers", {})


def param_count(config: ModernBertConfig, class_name: str) -> int:
    """The number of parameters of a class, from the table (no array is made)."""
    return sum(math.prod(e.shape) for e in Table(config, class_name).entries)


__all__ = ["CLASS_NAMES", "Entry", "Table", "encoder_rows", "head_rows", "is_scanned", "param_count"]


def mlm_rows(config) -> list:
    """The MLM head's param rows (its family entry's mlm_rows)."""
    return head_rows(config, "ModernBertForMaskedLM")


def family_table(config, model_class, scan_layers=False, add_pooling_layer=None) -> Table:
    """The key table as the family registry calls it (ModernBERT has no pooler to add)."""
    return Table(config, model_class, scan_layers)
