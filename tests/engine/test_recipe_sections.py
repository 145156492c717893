"""The recipe sections every run has, held to what they describe."""

from __future__ import annotations

import dataclasses

from jaxbert.engine.recipe import _NOT_IN_RECIPES, COMPUTE_FIELDS, ComputeSection
from jaxbert.model.options import ModelOptions

# Where a recipe's default is not ModelOptions' own, and why: recipes spell dtypes by name, and default
# to the hash dropout (cheap on TPU) where ModelOptions keeps flax's threefry.
RECIPE_DEFAULTS = {"dtype": "float32", "param_dtype": "float32", "dropout_impl": "hash"}


def test_the_model_section_is_model_options_fields_as_recipe_keys():
    options = {f.name: f for f in dataclasses.fields(ModelOptions) if f.name not in _NOT_IN_RECIPES}
    section = {f.name: f for f in dataclasses.fields(ComputeSection)}
    assert list(section) == list(options) == list(COMPUTE_FIELDS)  # a new option is a recipe key, in order
    for name, f in section.items():
        assert f.default == RECIPE_DEFAULTS.get(name, options[name].default), name
    # and the section builds the options it describes
    built = ComputeSection(scan_layers=True, attention_chunks=2).options()
    assert built == ModelOptions(dtype="float32", param_dtype="float32", scan_layers=True, attention_chunks=2,
                                 dropout_impl="hash")
