"""The declarative table between transformers' BERT state-dict keys and jaxbert params.

jaxbert names its modules exactly as transformers does, so a row is one
PyTorch module path and the kind of module it is; the kind says which tensors
the module holds, what each is called on the Flax side, and how it is
transformed:

    PyTorch                      Flax                  transform
    Linear.weight [out, in]      Dense.kernel [in, out] transpose
    Linear.bias                  Dense.bias             copy
    LayerNorm.weight (gamma)     LayerNorm.scale        copy
    LayerNorm.bias (beta)        LayerNorm.bias         copy
    Embedding.weight [N, H]      Embed.embedding [N, H] copy

The Flax path is the PyTorch module path split on dots, except that
``encoder.layer.{i}`` becomes ``encoder/layer`` with a leading layer axis when
the layers are scanned.
"""

from __future__ import annotations

import math
from typing import Iterator

from jaxbert.convert.result import ConversionError
from jaxbert.model.config import BertConfig, bert_class_name
from jaxbert.model.families import family_of, family_of_class, root_of
from jaxbert.model.keys import COPY, TRANSPOSE, Entry
from jaxbert.model.registry import for_config, head

LINEAR = TRANSPOSE  # [out, in] <-> [in, out]

# kind -> ((torch leaf, flax leaf, transform, shape from the row's dims), ...)
_LEAVES = {
    "dense": (("weight", "kernel", LINEAR, lambda i, o: (i, o)), ("bias", "bias", COPY, lambda i, o: (o,))),
    "dense_nobias": (("weight", "kernel", LINEAR, lambda i, o: (i, o)),),
    "norm": (("weight", "scale", COPY, lambda h: (h,)), ("bias", "bias", COPY, lambda h: (h,))),
    "embed": (("weight", "embedding", COPY, lambda n, h: (n, h)),),
    "bias": (("bias", "bias", COPY, lambda v: (v,)),),  # a bare parameter on the module itself
}
_FLAX_TO_TORCH_LEAF = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}
LEGACY_LEAVES = {"gamma": "weight", "beta": "bias"}  # TF-era LayerNorm names

def _embeddings(c: BertConfig) -> list:
    H = c.hidden_size
    return [("embeddings.word_embeddings", "embed", (c.vocab_size, H)),
            ("embeddings.position_embeddings", "embed", (c.max_position_embeddings, H)),
            ("embeddings.token_type_embeddings", "embed", (c.type_vocab_size, H)),
            ("embeddings.LayerNorm", "norm", (H,))]


def _attention(c: BertConfig, block: str, relative: bool) -> list:
    H = c.hidden_size
    rows = [(f"{block}.self.{n}", "dense", (H, H)) for n in ("query", "key", "value")]
    if relative:
        rows.append((f"{block}.self.distance_embedding", "embed",
                     (2 * c.max_position_embeddings - 1, c.head_dim)))
    return rows + [(f"{block}.output.dense", "dense", (H, H)),
                   (f"{block}.output.LayerNorm", "norm", (H,))]


def _layer(c: BertConfig, cross: bool) -> list:
    """Rows of one encoder layer, relative to ``encoder.layer.{i}``."""
    H, I = c.hidden_size, c.intermediate_size
    rows = _attention(c, "attention", c.position_embedding_type != "absolute")
    if cross:
        rows += _attention(c, "crossattention", relative=False)  # transformers forces absolute there
    return rows + [("intermediate.dense", "dense", (H, I)),
                   ("output.dense", "dense", (I, H)),
                   ("output.LayerNorm", "norm", (H,))]


class Table:
    """Every tensor of one model class under one config and layout.

    Attributes:
      entries: the Entry of every param leaf (per layer when scanned).
      prefix: the encoder's state-dict prefix ("bert." or "roberta." for the heads, "" for the bare encoder).
      aliases: tied state-dict keys -> the key whose tensor they must equal.
      leaf_shapes: param path -> full leaf shape (with the layer axis when scanned).
    """

    base_modules = ("embeddings.", "encoder.", "pooler.")  # the encoder's top-level modules

    def __init__(self, config: BertConfig, model_class: str, scan_layers: bool = False,
                 add_pooling_layer: bool | None = None):
        config.class_name(model_class)  # refuses a head the config's family lacks
        spec = self.spec = for_config(head(bert_class_name(model_class)), config)
        self.config, self.model_class, self.scan_layers = config, model_class, scan_layers
        pooler = spec.pooler if add_pooling_layer is None else add_pooling_layer
        self.base = spec.family.prefix  # "bert" or "roberta"
        self.prefix = spec.prefix
        cross = config.add_cross_attention and spec.cross_attention
        base = _embeddings(config)
        if pooler:
            base.append(("pooler.dense", "dense", (config.hidden_size, config.hidden_size)))
        rows = [(self.prefix + m, k, d, None) for m, k, d in base]
        for i in range(config.num_hidden_layers):
            rows += [(f"{self.prefix}encoder.layer.{i}.{m}", k, d, i) for m, k, d in _layer(config, cross)]
        rows += [(m, k, d, None) for m, k, d in spec.rows(config)]
        self.entries = [e for row in rows for e in self._expand(*row)]
        self.by_key = {e.key: e for e in self.entries}
        self.aliases = spec.ties(config)
        self.leaf_shapes = {}
        for e in self.entries:
            self.leaf_shapes[e.path] = ((config.num_hidden_layers,) + e.shape) if e.layer is not None else e.shape

    def _expand(self, module: str, kind: str, dims: tuple, layer: int | None) -> Iterator[Entry]:
        path = tuple(module.split("."))
        scanned = layer is not None and self.scan_layers
        if scanned:  # encoder.layer.{i}.x -> encoder/layer/x
            i = path.index("layer")
            path = path[:i + 1] + path[i + 2:]
        for torch_leaf, flax_leaf, transform, shape in _LEAVES[kind]:
            yield Entry(f"{module}.{torch_leaf}", path + (flax_leaf,), transform, shape(*dims),
                        layer if scanned else None)

    def leaf_bytes(self, itemsize: int) -> int:
        return sum(math.prod(s) for s in self.leaf_shapes.values()) * itemsize


def table_for(config, model_class: str, scan_layers: bool = False, add_pooling_layer: bool | None = None):
    """The key table of a model class, from the family its config's model_type names: the family's
    own (``Family.table``, the same interface) or, for the families built on BERT's modules, ``Table``.
    A class of another architecture (a family with modules of its own on either side) is refused naming both."""
    family = family_of(config)
    own = family_of_class(model_class)
    if own is not None and root_of(own) is not root_of(family):
        saved = (getattr(config, "architectures", None) or [f"a {config.model_type!r} class"])[0]
        raise ConversionError(f"a {saved} checkpoint (model_type {config.model_type!r}) does not load into "
                              f"{model_class}: they are different architectures")
    if family.table is not None:
        return family.table(config, model_class, scan_layers, add_pooling_layer)
    return Table(config, model_class, scan_layers, add_pooling_layer)


# ---- transforms -----------------------------------------------------------------

def to_flax(entry: Entry, tensor):
    """A state-dict tensor -> the Flax array of this entry (a view where possible)."""
    return tensor.T if entry.transform == LINEAR else tensor


def to_torch(entry: Entry, array):
    return array.T if entry.transform == LINEAR else array


def flax_name_to_key(path: tuple) -> tuple[str, bool]:
    """A per-layer Flax param path -> (state-dict key, whether to transpose).

    HF Flax msgpack files and jaxbert trees use transformers' module names, so
    only the leaf name and the kernel layout change.
    """
    *module, leaf = path
    if leaf not in _FLAX_TO_TORCH_LEAF:
        return ".".join(path), False
    return ".".join([*module, _FLAX_TO_TORCH_LEAF[leaf]]), leaf == "kernel"
