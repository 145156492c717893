"""The model families jaxbert builds, by name: the registry is data about the family folders.

Each family lives in a folder of ``jaxbert/model/`` (its config, modules, key table) whose
``family.py`` holds its entry, ``FAMILY`` (a ``Family``). ``FOLDERS`` lists those folders, one entry
per folder, in registration order; adding a family inside the package is its folder and its name
there. ``register(family)`` adds one from outside the package (or a copy of another family made with
``dataclasses.replace``).

``family_of(config or model_type)`` is how the rest of the package asks what a family does. Importing
the registry imports each folder's ``family.py`` and config, never its model code: reading a config
loads no jax (a family's members that reach model code import it inside the function).
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping

from jaxbert.model.contract import Family

# The folders of jaxbert/model/ that hold a family (FOLDER/family.py: FAMILY), registered in this order when
# the registry is first read. A new family inside the package is its folder and one entry here.
FOLDERS = ("bert", "roberta", "modernbert", "eurobert", "electra", "deberta_v2")

_FAMILIES: dict = {}
_BY_MODEL_TYPE: dict = {}
_loaded = False


def _load() -> None:
    """Registers each folder's FAMILY, once, at the registry's first use (not at its import: a family's
    entry imports its config, and BertConfig reads the registry)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for folder in FOLDERS:
        register(importlib.import_module(f"jaxbert.model.{folder}.family").FAMILY)


class _View(MutableMapping):
    """One of the registry's tables, read as it is now (the folders' families loaded). Add and remove families
    with register / unregister; setting an entry swaps one family's entry in place (a test's monkeypatch)."""

    def __init__(self, table: dict):
        self._table = table

    def __getitem__(self, key):
        _load()
        return self._table[key]

    def __iter__(self):
        _load()
        return iter(dict(self._table))

    def __len__(self):
        _load()
        return len(self._table)

    def __setitem__(self, key, family):
        _load()
        self._table[key] = family

    def __delitem__(self, key):
        _load()
        del self._table[key]

    def __repr__(self):
        return repr(dict(self))


# name -> Family, and config.json model_type -> Family: anything else is refused by name.
FAMILIES = _View(_FAMILIES)
BY_MODEL_TYPE = _View(_BY_MODEL_TYPE)


def __getattr__(name: str):
    """MODEL_TYPES: the registered model types, read at each access (a family registered at run time counts)."""
    if name == "MODEL_TYPES":
        return model_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(family: Family) -> Family:
    """Adds a family: its model types are read, its classes built, converted, checked for parity and
    listed among jaxbert's public names (``jaxbert.MODEL_TYPES``, ``jaxbert.<Class>``). A name or a
    model type another family has is refused (ValueError naming it)."""
    _load()
    taken = [t for t in family.model_types if t in _BY_MODEL_TYPE]
    if family.name in _FAMILIES or taken:
        raise ValueError(f"family {family.name!r}: {'its name' if family.name in _FAMILIES else taken} "
                         "already registered")
    if family.builds_on and family.builds_on not in _FAMILIES:
        raise ValueError(f"family {family.name!r} builds on {family.builds_on!r}, which is not registered")
    _FAMILIES[family.name] = family
    _BY_MODEL_TYPE.update(dict.fromkeys(family.model_types, family))
    return family


def unregister(name: str) -> None:
    """Removes a family ``register`` added (KeyError naming an unknown one)."""
    _load()
    family = _FAMILIES.pop(name)
    for t in family.model_types:
        del _BY_MODEL_TYPE[t]


def model_types() -> tuple:
    """The model types of every registered family, now (a family registered at run time included)."""
    return tuple(BY_MODEL_TYPE)


def supported() -> str:
    """The registered model types as a refusal lists them: "'bert', 'roberta', ..."."""
    return ", ".join(map(repr, BY_MODEL_TYPE))


def family_of(config_or_model_type) -> Family:
    """The family of a config (or of a model_type string); KeyError naming the known types."""
    model_type = getattr(config_or_model_type, "model_type", config_or_model_type)
    if model_type not in BY_MODEL_TYPE:
        raise KeyError(f"model_type {model_type!r} is not supported; jaxbert reads {supported()}")
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


def family_of_params(params, config_or_class=None) -> Family:
    """The family of a param tree. A family is identified by its config or class name, never by its
    parameter prefix (a family registered on RoBERTa's modules has RoBERTa's tree): given
    ``config_or_class`` (a config, a model_type or a class name), its family, once the tree is seen to
    hold that family's word embeddings (KeyError naming the path where not). Without one, for code that
    needs only the tree's layout (its layer stack, its vocabulary), the first registered family whose
    encoder (its name, and its word-embedding table under it) or bare word-embedding table the tree
    holds; KeyError naming what it looked for."""
    tree = params.get("params", params)
    if config_or_class is not None:
        family = (family_of_class(config_or_class) if isinstance(config_or_class, str)
                  and config_or_class not in BY_MODEL_TYPE else family_of(config_or_class))
        if family is None:
            raise KeyError(f"{config_or_class!r} is no class or model_type of a registered family")
        if not (_holds_embeddings(family, tree.get(family.prefix, {})) or _holds_embeddings(family, tree)):
            raise KeyError(f"the params hold no {family.name} encoder (looked for "
                           f"{family.prefix}/{family.embedding_path})")
        return family
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


# Model types README's table names as refused: those of them no family reads (one registered drops out).
UNREAD_EXAMPLES = ("distilbert", "albert", "deberta", "xlnet", "gpt2")


def markdown_table() -> str:
    """README's table of the families, one row per registered family (tests/model/test_family_contract.py
    checks that README holds it as rendered here)."""
    rows = ["| `model_type` in config.json | classes | differences handled |", "|---|---|---|"]
    for f in FAMILIES.values():
        types = ", ".join(f"`{t}`" for t in f.model_types) + (f" ({f.also})" if f.also else "")
        rows.append(f"| {types} | {', '.join(f'`{c}`' for c in f.class_names())} | {f.differences} |")
    others = ", ".join(f"`{t}`" for t in UNREAD_EXAMPLES if t not in BY_MODEL_TYPE)
    rows.append(f"| anything else ({others}, ...) | refused, naming the `model_type` and the supported ones | |")
    return "\n".join(rows) + "\n"


def pretraining_classes() -> tuple:
    """The classes an MLM pretraining recipe may name, over every family."""
    return tuple(c for f in FAMILIES.values() for c in f.pretraining_classes)


__all__ = ["BY_MODEL_TYPE", "FAMILIES", "FOLDERS", "MODEL_TYPES", "Family", "config_classes", "family_of", "family_of_class",
           "family_of_params", "model_types", "register", "root_class_name", "root_of", "special_spellings", "supported",
           "unregister", "pretraining_classes"]
