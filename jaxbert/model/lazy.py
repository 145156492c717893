"""A package's names that live in its model code (flax), read from their modules when first asked for, so that
importing the package (a family's folder, to read its config) loads no jax."""

from __future__ import annotations

import importlib


def lazy_names(package: str, homes: dict | None = None):
    """The module ``__getattr__`` of ``package`` that reads each name of ``homes`` (name -> module) there; by
    default a family folder's: MODEL_CLASSES (its heads.py), Table, is_scanned, param_count (its table.py) and
    dummy_inputs (jaxbert.model.classes)."""
    if homes is None:
        homes = {"MODEL_CLASSES": f"{package}.heads", "Table": f"{package}.table", "is_scanned": f"{package}.table",
                 "param_count": f"{package}.table", "dummy_inputs": "jaxbert.model.classes"}

    def __getattr__(name: str):
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
