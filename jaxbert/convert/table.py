"""The converter's side of the key tables: which family's table a class is read through
(``table_for``), and the transforms their entries name (a Linear weight is transposed, every other
tensor copied). BERT's table is ``jaxbert.model.bert.table.Table``; ModernBERT's is
``jaxbert.model.modernbert.table.Table``.
"""

from __future__ import annotations

from jaxbert.convert.result import ConversionError
from jaxbert.model.families import family_of, family_of_class, root_of
from jaxbert.model.keys import TRANSPOSE, Entry

LINEAR = TRANSPOSE  # [out, in] <-> [in, out]
_FLAX_TO_TORCH_LEAF = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}
LEGACY_LEAVES = {"gamma": "weight", "beta": "bias"}  # TF-era LayerNorm names


def table_for(config, model_class: str, scan_layers: bool = False, add_pooling_layer: bool | None = None):
    """The key table of a model class, from the family its config's model_type names (``Family.table``:
    BERT's ``Table`` for the families on BERT's modules, ModernBERT's own). A class of another
    architecture (a family with modules of its own on either side) is refused naming both."""
    family = family_of(config)
    own = family_of_class(model_class)
    if own is not None and root_of(own) is not root_of(family):
        saved = (getattr(config, "architectures", None) or [f"a {config.model_type!r} class"])[0]
        raise ConversionError(f"a {saved} checkpoint (model_type {config.model_type!r}) does not load into "
                              f"{model_class}: they are different architectures")
    return family.table(config, model_class, scan_layers, add_pooling_layer)


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
