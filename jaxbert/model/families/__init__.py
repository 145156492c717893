"""The model families jaxbert builds, by name: adding one is a module here and a line below
(or ``register(family)`` from outside the package).

``family_of(config or model_type)`` is how the rest of the package asks what a family does. The
registry is data: importing it loads no model code (a family names its modules, imported when read).
"""

from __future__ import annotations

import dataclasses
import warnings

from jaxbert.model.families.bert import BERT
from jaxbert.model.families.eurobert import EUROBERT
from jaxbert.model.families.modernbert import MODERNBERT
from jaxbert.model.families.roberta import ROBERTA
from jaxbert.model.families.spec import INHERITED, Family

FAMILIES: dict = {}
# config.json model_type values jaxbert builds; anything else is refused by name.
BY_MODEL_TYPE: dict = {}
MODEL_TYPES: tuple = ()


def register(family: Family) -> Family:
    """Adds a family: its model types are read, its classes built, converted, checked for parity and
    listed among jaxbert's public names (``jaxbert.MODEL_TYPES``, ``jaxbert.<Class>``). A name or a
    model type another family has is refused (ValueError naming it)."""
    global MODEL_TYPES
    taken = [t for t in family.model_types if t in BY_MODEL_TYPE]
    if family.name in FAMILIES or taken:
        raise ValueError(f"family {family.name!r}: {'its name' if family.name in FAMILIES else taken} "
                         "already registered")
    unsaid = [n for n in INHERITED if object.__getattribute__(family, n) is None]
    if unsaid:  # a family on another's modules that does not name these: they were that family's, unsaid
        base = FAMILIES[family.builds_on]
        warnings.warn(f"family {family.name!r} does not say its {', '.join(unsaid)}: taking {base.name!r}'s, "
                      "which will be refused in 0.3.0 (name them, as jaxbert.model.families.roberta does)",
                      DeprecationWarning, stacklevel=2)
        family = dataclasses.replace(family, **{n: object.__getattribute__(base, n) for n in unsaid})
    FAMILIES[family.name] = family
    BY_MODEL_TYPE.update(dict.fromkeys(family.model_types, family))
    MODEL_TYPES = tuple(BY_MODEL_TYPE)
    return family


def unregister(name: str) -> None:
    """Removes a family ``register`` added (KeyError naming an unknown one)."""
    global MODEL_TYPES
    family = FAMILIES.pop(name)
    for t in family.model_types:
        del BY_MODEL_TYPE[t]
    MODEL_TYPES = tuple(BY_MODEL_TYPE)


for _family in (BERT, ROBERTA, MODERNBERT, EUROBERT):
    register(_family)
del _family


def family_of(config_or_model_type) -> Family:
    """The family of a config (or of a model_type string); KeyError naming the known types."""
    model_type = getattr(config_or_model_type, "model_type", config_or_model_type)
    if model_type not in BY_MODEL_TYPE:
        raise KeyError(f"model_type {model_type!r} is not supported; jaxbert supports {MODEL_TYPES}")
    return BY_MODEL_TYPE[model_type]


def family_of_class(name: str) -> Family | None:
    """The family whose own class name this is ("RobertaForMaskedLM" -> RoBERTa), or None."""
    for family in FAMILIES.values():
        if name in family.class_names():
            return family
    return None


def root_of(family: Family) -> Family:
    """The family whose own classes a family's are (RoBERTa -> BERT; BERT, ModernBERT -> themselves)."""
    while family.builds_on:
        family = FAMILIES[family.builds_on]
    return family


def root_class_name(name: str) -> str:
    """The class a family's class is built from, in the family that owns the modules:
    'XLMRobertaForMaskedLM' -> 'BertForMaskedLM'; a class of a family with its own classes is itself."""
    family = family_of_class(name)
    if family is None or not family.builds_on:
        return name
    root = root_of(family)
    for prefix in sorted(set(family.class_prefixes.values()), key=len, reverse=True):
        if name.startswith(prefix):
            return root.class_prefix(root.model_types[0]) + name[len(prefix):]
    return name


def config_classes() -> tuple:
    """Every config class of the registered families."""
    return tuple(dict.fromkeys(f.config_class for f in FAMILIES.values()))


def family_of_params(params) -> Family:
    """The family whose model a param tree is, for code handed only a tree (a checkpoint's): the
    family whose encoder it holds (its name, and its word-embedding table under it), else whose
    word-embedding table it has at its top (a bare encoder); KeyError naming what it looked for."""
    tree = params.get("params", params)
    for family in FAMILIES.values():  # ModernBERT's and EuroBERT's encoders are both "model"
        if family.prefix in tree and _holds_embeddings(family, tree[family.prefix]):
            return family
    for family in FAMILIES.values():
        if _holds_embeddings(family, tree):
            return family
    raise KeyError(f"the params hold no encoder of a known family (looked for "
                   f"{', '.join(f.prefix + '/' + f.embedding_path for f in FAMILIES.values())})")


def _holds_embeddings(family: Family, tree) -> bool:
    try:
        family.word_embeddings(tree)
    except (KeyError, TypeError, AttributeError):
        return False
    return True


def special_spellings(role: str) -> tuple:
    """How the registered families' tokenizers spell a special token ("mask" -> ("[MASK]", "<mask>")), each once."""
    return tuple(dict.fromkeys(f.special_tokens[role] for f in FAMILIES.values()))


def markdown_table() -> str:
    """README's table of the families, one row per registered family (tests/model/test_family_contract.py
    checks that README holds it as rendered here)."""
    rows = ["| `model_type` in config.json | classes | differences handled |", "|---|---|---|"]
    for f in FAMILIES.values():
        types = ", ".join(f"`{t}`" for t in f.model_types) + (f" ({f.also})" if f.also else "")
        rows.append(f"| {types} | {', '.join(f'`{c}`' for c in f.class_names())} | {f.differences} |")
    rows.append("| anything else (`distilbert`, `electra`, `albert`, `deberta-v2`, `gpt2`, ...) | refused, naming "
                "the `model_type` and the supported ones | |")
    return "\n".join(rows) + "\n"


def pretraining_classes() -> tuple:
    """The classes an MLM pretraining recipe may name, over every family."""
    return tuple(c for f in FAMILIES.values() for c in f.pretraining_classes)


__all__ = ["BY_MODEL_TYPE", "FAMILIES", "MODEL_TYPES", "Family", "config_classes", "family_of", "family_of_class",
           "family_of_params", "register", "root_class_name", "root_of", "special_spellings", "unregister", "pretraining_classes"]
