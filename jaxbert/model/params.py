"""Param trees: flatten/unflatten, and the scanned <-> per-layer layouts.

Per-layer: params[...]['encoder']['layer']['0' | '1' | ...][...]; scanned
(nn.scan over the layers): one params[...]['encoder']['layer'][...] whose
leaves carry a leading layer axis.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import flax
import jax
import jax.numpy as jnp


def iter_flat(tree: Mapping, path: tuple = ()) -> Iterator[tuple[tuple, object]]:
    """Yield (path tuple, leaf) of a nested mapping, depth first in insertion order."""
    for name, value in tree.items():
        if isinstance(value, Mapping):
            yield from iter_flat(value, path + (name,))
        else:
            yield path + (name,), value


def flatten(tree: Mapping, sep: str | None = None) -> dict:
    """Nested mapping -> {path tuple: leaf}, or {'a/b/c': leaf} with ``sep='/'``."""
    return {(sep.join(p) if sep else p): v for p, v in iter_flat(tree)}


def unflatten(flat: Mapping, sep: str | None = None) -> dict:
    """{path tuple: leaf} (or {'a/b/c': leaf} with ``sep``) -> nested dicts."""
    tree: dict = {}
    for path, value in flat.items():
        path = tuple(path.split(sep)) if sep else path
        node = tree
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return tree


def stacked(layer: Mapping) -> bool:
    """Whether one encoder's 'layer' dict is the scanned stack (no '0', '1', ... level)."""
    return not all(str(k).isdigit() for k in layer)


def _find_layer_parent(tree: dict, path=()):
    """Yield (path, encoder dict) for every dict that holds the layer stack."""
    if isinstance(tree, Mapping):
        if "layer" in tree and isinstance(tree["layer"], Mapping):
            yield path, tree
        else:
            for k, v in tree.items():
                yield from _find_layer_parent(v, path + (k,))


def _map_encoders(params, fn):
    params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else params
    params = jax.tree_util.tree_map(lambda x: x, params)  # shallow-safe copy of the dict tree
    for _, encoder in list(_find_layer_parent(params)):
        encoder["layer"] = fn(encoder["layer"])
    return params


def unscan_params(params: dict) -> dict:
    """Scanned layout (one 'layer' dict, leading layer axis) -> {'0': ..., '1': ...}."""
    def split(layer):
        if not stacked(layer):
            return layer  # already per-layer
        n = jax.tree_util.tree_leaves(layer)[0].shape[0]
        return {str(i): jax.tree_util.tree_map(lambda x, i=i: x[i], layer) for i in range(n)}
    return _map_encoders(params, split)


def scan_params(params: dict) -> dict:
    """Per-layer layout {'0': ..., '1': ...} -> scanned (leading layer axis)."""
    def stack(layer):
        if stacked(layer):
            return layer  # already scanned
        layers = [layer[str(i)] for i in range(len(layer))]
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *layers)
    return _map_encoders(params, stack)


def is_scanned(params) -> bool:
    """Whether an encoder's 'layer' dict is stacked (no '0', '1', ... level); False without layers."""
    return any(stacked(enc["layer"]) for _, enc in _find_layer_parent(params))
