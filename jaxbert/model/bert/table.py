"""BERT's key table: transformers' state-dict keys <-> jaxbert params, for every class built on
BERT's modules (BERT, RoBERTa and the families that build on them), and which of those classes a
checkpoint was saved from. The families name these as their ``table`` and ``infer_class``
(jaxbert.model.bert.family); the converter (jaxbert.convert) reads every family's table alike.

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

from jaxbert.errors import ConfigError
from jaxbert.model.bert.config import BertConfig, bert_class_name
from jaxbert.model.classes import ALL_MODEL_CLASSES
from jaxbert.model.keys import COPY, TRANSPOSE, Entry
from jaxbert.model.registry import HEADS, for_config, head

LINEAR = TRANSPOSE  # [out, in] <-> [in, out]

# kind -> ((torch leaf, flax leaf, transform, shape from the row's dims), ...)
_LEAVES = {
    "dense": (("weight", "kernel", LINEAR, lambda i, o: (i, o)), ("bias", "bias", COPY, lambda i, o: (o,))),
    "dense_nobias": (("weight", "kernel", LINEAR, lambda i, o: (i, o)),),
    "norm": (("weight", "scale", COPY, lambda h: (h,)), ("bias", "bias", COPY, lambda h: (h,))),
    "embed": (("weight", "embedding", COPY, lambda n, h: (n, h)),),
    "bias": (("bias", "bias", COPY, lambda v: (v,)),),  # a bare parameter on the module itself
}


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


def infer_class(config: BertConfig, keys: list) -> str | None:
    """The class a checkpoint on BERT's modules was saved from: its config's ``architectures`` entry
    (any jaxbert class; the converter refuses one of another architecture by name), else the class
    of its family whose head rows its keys hold best; None when ``architectures`` names no jaxbert class."""
    for arch in config.architectures or ():
        if arch in ALL_MODEL_CLASSES:
            return arch
    if config.architectures:
        return None
    modules = {k.rpartition(".")[0] for k in keys}

    def score(spec):  # (all its head modules present, how many, decoder and pooler as in the checkpoint)
        spec = for_config(spec, config)
        wanted = {m for m, _, _ in spec.rows(config)}
        pooler = any(m.endswith("pooler.dense") for m in modules)
        return (wanted <= modules, len(wanted), spec.decoder == config.is_decoder, spec.pooler == pooler)

    # Registry order breaks ties: multiple choice looks like sequence classification; name it if so.
    best = max((h for h in HEADS.values() if _in_family(config, h.name)), key=score)  # max keeps the first
    return config.class_name(best.name)


def _in_family(config: BertConfig, name: str) -> bool:
    try:
        config.class_name(name)
    except ConfigError:
        return False  # RoBERTa has no NSP / pretraining / decoder heads
    return True
