"""Every registered family's model classes by name, and building one: what the rest of jaxbert calls to
make a model (``build_model("RobertaForMaskedLM", config)``) without naming a family."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from jaxbert.model.families import FAMILIES, family_of_class
from jaxbert.model.options import ModelOptions
from jaxbert.model.registry import spec_of


class _AllClasses(Mapping):
    """Every registered family's classes by name, as the registry holds them now."""

    def _classes(self) -> dict:
        return {name: cls for family in FAMILIES.values() for name, cls in family.classes().items()}

    def __getitem__(self, name):
        return self._classes()[name]

    def __iter__(self):
        return iter(self._classes())

    def __len__(self):
        return len(self._classes())


# Every family's classes by name, read from the registry at each access (a family registered later counts).
ALL_MODEL_CLASSES = _AllClasses()


def dummy_inputs(model_cls_or_name, batch: int = 1, length: int = 8) -> tuple:
    """Integer inputs shaped for init (multiple choice wants [B, C, L])."""
    name = model_cls_or_name if isinstance(model_cls_or_name, str) else model_cls_or_name.__name__
    shape = (batch, 2, length) if spec_of(name).choices else (batch, length)
    return jnp.zeros(shape, jnp.int32), jnp.zeros(shape, jnp.int32)


def param_count(params) -> int:
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


def build_model(model_class: str, config, options: ModelOptions = ModelOptions(), **kwargs):
    """The module of a class name, of any registered family, for this config and these options.

    ``kwargs`` go to the family's ``build`` (``add_pooling_layer`` for a bare encoder on BERT's modules).
    """
    if model_class not in ALL_MODEL_CLASSES:
        raise ValueError(f"model class {model_class!r} is unknown; expected one of {tuple(ALL_MODEL_CLASSES)}")
    return family_of_class(model_class).build(model_class, config, options, **kwargs)


__all__ = ["ALL_MODEL_CLASSES", "build_model", "dummy_inputs", "param_count"]
