"""Every model class, described once: what it carries and how its params are named.

The converter (the key table), the parity tool and the tests read this
registry; nothing else lists the classes or their heads.

A ``Family`` (jaxbert.model.families) says how one model family names its modules
in a transformers state dict (the encoder's prefix, its MLM head); a ``Head`` says
what one class carries on top of the encoder. A head's param rows are
``(module path, module kind, dims)``: the kind names the tensors the module
holds ("dense", "dense_nobias", "norm", "embed", "bias"), and the dims size them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jaxbert.model.contract import Head
from jaxbert.model.families import BY_MODEL_TYPE, FAMILIES, Family, family_of_class, root_class_name, root_of

__all__ = ["HEADS", "Family", "Head", "for_config", "head", "main_output", "spec_of"]


# BERT's classes, as its family lists them; a family on BERT's modules reads these under its names (for_config).
HEADS = {name: Head(name, FAMILIES["bert"], **fields) for name, fields in FAMILIES["bert"].class_specs.items()}


def head(name: str) -> Head:
    """The registry entry of a class name; KeyError naming the known ones."""
    if name not in HEADS:
        raise KeyError(f"unknown model class {name!r}; expected one of {sorted(HEADS)}")
    return HEADS[name]


def main_output(spec: Head, out, stack: Callable):
    """The head's main output from either framework's output object (``stack`` is
    np.stack, jnp.stack or torch.stack, used when it is several arrays)."""
    values = [getattr(out, attr) for attr in spec.main]
    return values[0] if len(values) == 1 else stack(values, -1)


def for_config(spec: Head, config) -> Head:
    """The class as the config's family names it (a Bert* class takes its family from the config)."""
    family = BY_MODEL_TYPE[config.model_type]
    if family is spec.family:
        return spec
    changes = {"family": family}
    if spec.sequence_classifier and family.seq_classifier_rows is not None:
        # the family's own classifier on the first token, with no pooler (RoBERTa's dense -> tanh -> out_proj)
        changes.update(pooler=False, extra_rows=family.seq_classifier_rows)
    return dataclasses.replace(spec, **changes)


def spec_of(name: str, config=None) -> Head:
    """The registry entry of any family's class name: its family's ``class_specs`` entry, or for a family
    that builds on another (RoBERTa on BERT), that family's entry of the class it is built from, under
    the config's family."""
    family = family_of_class(name)
    if family is None:
        return head(name)  # KeyError naming the known ones
    root = root_of(family)
    base = root_class_name(name)
    spec = Head(base, root, **root.class_specs[base])
    return spec if config is None else for_config(spec, config)
