"""The layer stack's machinery: a layer class under the remat policy, and the scan of identical layers
whose params carry a leading layer axis (sharded along the logical axis "layers")."""

from __future__ import annotations

import flax.linen as nn

from jaxbert.model.options import REMAT_POLICIES


def remat_layer(cls, options, in_scan: bool, static_argnums: tuple):
    """cls under options.remat_policy (cls itself for "none"). static_argnums (counting self): the layer's
    Python switches (deterministic, output_attentions). Under scan, CSE cannot merge the recomputation into
    the forward pass, so its guard (prevent_cse) is not needed."""
    if options.remat_policy == "none":
        return cls
    return nn.remat(cls, policy=REMAT_POLICIES[options.remat_policy], prevent_cse=not in_scan,
                    static_argnums=static_argnums)


def carry_form(layer_cls):
    """layer_cls in nn.scan's (carry, ...) -> (carry, y) form, for a layer whose __call__(hidden, *args) takes
    its arguments in the scan's order and returns (hidden, probabilities): y is (hidden, probabilities)."""

    class CarryForm(layer_cls):
        def __call__(self, carry, *args, **kwargs):
            hidden, probs = super().__call__(carry, *args, **kwargs)
            return hidden, (hidden, probs)

    CarryForm.__name__ = CarryForm.__qualname__ = f"{layer_cls.__name__}CarryForm"
    return CarryForm


def scan_layers(cls, length: int, in_axes: tuple, variable_axes: dict | None = None):
    """nn.scan of a layer in (carry, x) -> (carry, y) form over `length` layers: params (and the collections
    in variable_axes) stacked on a leading axis named "layers", fresh init and dropout randomness per layer;
    in_axes: per argument after the carry, 0 (one slice per layer) or nn.broadcast."""
    return nn.scan(cls, variable_axes=variable_axes or {"params": 0}, split_rngs={"params": True, "dropout": True},
                   in_axes=in_axes, length=length, metadata_params={nn.PARTITION_NAME: "layers"})


def kind_period(kinds) -> int | None:
    """The shortest p < len(kinds) with kinds[i] == kinds[i % p] for all i (len(kinds) a multiple of p), where
    the kinds are mixed; None where they are all one kind or repeat no shorter pattern."""
    kinds = tuple(kinds)
    if len(set(kinds)) < 2:
        return None
    for p in range(2, len(kinds)):
        if len(kinds) % p == 0 and kinds == kinds[:p] * (len(kinds) // p):
            return p
    return None
