"""A converter key table built from module rows, for a family whose classes are its own (ModernBERT,
EuroBERT): the family lists its encoder's and each head's modules as (state-dict module path, kind, dims,
layer index or None) and this table expands them into one Entry per tensor, per layer or scanned.

A row's kind says which tensors the module holds and how each maps (BERT's conventions, jaxbert.model.bert.table;
the converter reads both through the same interface):

    linear (Linear.weight [out, in] <-> kernel [in, out], transposed; bias <-> bias), linear_nobias,
    norm (LayerNorm.weight <-> scale, bias <-> bias), norm_nobias (a norm without bias, RMSNorm's too),
    embed (Embedding.weight [V, H] <-> embedding), bias (a module holding only a bias [V]).

The Flax path is the module path split on dots. Scanned (LayerStack), the layers from `first` on become one
stack with a leading axis under the container (``layers/x``) or under its `stack` (``layers/scan/x``), layer
i at index i - first.
"""

from __future__ import annotations

import dataclasses
import math

from jaxbert.model.contract import LayerStack
from jaxbert.model.keys import COPY, TRANSPOSE, Entry


# module kind -> its tensors: (torch leaf, flax leaf, transform, whether the leaf is the bias)
_TENSORS = {
    "linear": (("weight", "kernel", TRANSPOSE, False), ("bias", "bias", COPY, True)),
    "linear_nobias": (("weight", "kernel", TRANSPOSE, False),),
    "norm": (("weight", "scale", COPY, False), ("bias", "bias", COPY, False)),
    "norm_nobias": (("weight", "scale", COPY, False),),
    "embed": (("weight", "embedding", COPY, False),),
    "bias": (("bias", "bias", COPY, False),),
}


def leaves(kind: str, dims: tuple) -> tuple:
    """(torch leaf, flax leaf, transform, flax shape) of one module kind: a linear's kernel is [in, out] (dims) and
    its bias [out]; a norm's scale and bias, an embedding and a lone bias are dims."""
    if kind not in _TENSORS:
        raise ValueError(f"unknown module kind {kind!r}")
    return tuple((t, f, transform, (dims[-1],) if out_bias else dims) for t, f, transform, out_bias in _TENSORS[kind])


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a family's table says of its tree.

    Attributes:
      prefix: the encoder's name in the head classes ("model").
      base_class: the bare encoder's class (its keys carry no prefix).
      mlm_class, mlm_decoder: the masked-LM class and its decoder's module path; when the config ties the
        word embeddings, ``{mlm_decoder}.weight`` is an alias of ``{prefix}.{embedding}.weight``.
      embedding: the word-embedding module path under the encoder.
      base_modules: the encoder's top-level modules, for a bare-encoder checkpoint read into a head class.
      stack: where the layers sit, per layer and scanned.
    """

    prefix: str
    base_class: str
    mlm_class: str
    mlm_decoder: str
    embedding: str
    base_modules: tuple
    stack: LayerStack


@dataclasses.dataclass(frozen=True)
class _Family:
    """What the converter's key matching reads of a family (as jaxbert.model.registry.Family)."""

    prefix: str
    mlm_decoder: str


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    family: _Family
    base: bool = False
    pooler: bool = False


class RowTable:
    """Every tensor of one class under one config and layout; the interface of jaxbert.model.bert.table.Table
    (entries, by_key, aliases, leaf_shapes, prefix, spec, base_modules).

    Args:
      encoder_rows: the bare encoder's rows, module paths without the prefix.
      head_rows: the class's head rows (not the encoder), full module paths.
    """

    def __init__(self, layout: Layout, config, model_class: str, encoder_rows: list, head_rows: list,
                 scan_layers: bool = False):
        self.layout, self.config, self.model_class, self.scan_layers = layout, config, model_class, scan_layers
        base = model_class == layout.base_class
        self.spec = _Spec(model_class, _Family(layout.prefix, layout.mlm_decoder), base=base)
        self.base_modules = layout.base_modules
        self.prefix = "" if base else layout.prefix + "."
        rows = [(self.prefix + m, k, d, i) for m, k, d, i in encoder_rows] + list(head_rows)
        self.entries = [e for row in rows for e in self._expand(*row)]
        self.by_key = {e.key: e for e in self.entries}
        self.aliases = {}
        if model_class == layout.mlm_class and config.tie_word_embeddings:
            self.aliases[f"{layout.mlm_decoder}.weight"] = f"{layout.prefix}.{layout.embedding}.weight"
        stacked = config.num_hidden_layers - layout.stack.first
        self.leaf_shapes = {e.path: ((stacked,) + e.shape if e.layer is not None else e.shape) for e in self.entries}

    def _expand(self, module: str, kind: str, dims: tuple, layer: int | None):
        path = tuple(module.split("."))
        stack = self.layout.stack
        scanned = self.scan_layers and layer is not None and layer >= stack.first
        if scanned:  # ...layers.{i}.x -> ...layers/x or ...layers/{stack}/x, index i - first
            at = path.index(stack.container)
            path = path[:at + 1] + ((stack.stack,) if stack.stack else ()) + path[at + 2:]
        for torch_leaf, flax_leaf, transform, shape in leaves(kind, dims):
            yield Entry(f"{module}.{torch_leaf}", path + (flax_leaf,), transform, shape,
                        layer - stack.first if scanned else None)

    def leaf_bytes(self, itemsize: int) -> int:
        return sum(math.prod(s) for s in self.leaf_shapes.values()) * itemsize

    def param_count(self) -> int:
        """The number of parameters of the class (no array is made)."""
        return sum(math.prod(e.shape) for e in self.entries)


def holds_scanned(layout: Layout, params) -> bool:
    """Whether a param tree of the family (a head class's or the bare encoder's) holds the scanned layout."""
    tree = params.get("params", params)
    return layout.stack.is_scanned(tree.get(layout.prefix, tree).get(layout.stack.container, {}))
