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

from jaxbert.model.contract import LayerStack


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


# The layout of the encoders built on BERT's modules (encoder/layer); a family with modules of its own
# passes its Family.layer_stack.
BERT_LAYERS = LayerStack("layer")


def _find_layers(tree, stacks, path=()):
    """Yield (dict holding a layer container, its LayerStack) for every encoder in the tree."""
    if isinstance(tree, Mapping):
        found = [s for s in stacks if isinstance(tree.get(s.container), Mapping)]
        if found:
            yield tree, found[0]
            return
        for k, v in tree.items():
            yield from _find_layers(v, stacks, path + (k,))


def _map_encoders(params, fn, stacks):
    params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else params
    params = jax.tree_util.tree_map(lambda x: x, params)  # shallow-safe copy of the dict tree
    for parent, spec in list(_find_layers(params, stacks)):
        parent[spec.container] = fn(parent[spec.container], spec)
    return params


def split_layers(layers: Mapping, spec: LayerStack) -> dict:
    """A container dict, scanned -> per layer {'0': ..., '1': ...} (as it is when already per layer)."""
    if not spec.is_scanned(layers):
        return dict(layers)
    stack = layers[spec.stack] if spec.stack else layers
    n = jax.tree_util.tree_leaves(stack)[0].shape[0]
    out = {k: v for k, v in layers.items() if k != spec.stack} if spec.stack else {}
    out.update({str(spec.first + i): jax.tree_util.tree_map(lambda x, i=i: x[i], stack) for i in range(n)})
    return out


def unscan_params(params: dict, stacks: tuple = (BERT_LAYERS,)) -> dict:
    """Scanned layout (a stack with a leading layer axis) -> per layer {'0': ..., '1': ...}."""
    return _map_encoders(params, split_layers, stacks)


def scan_params(params: dict, stacks: tuple = (BERT_LAYERS,)) -> dict:
    """Per-layer layout {'0': ..., '1': ...} -> scanned (leading layer axis)."""
    def stack(layers, spec):
        if spec.is_scanned(layers):
            return layers  # already scanned
        n = sum(1 for k in layers if str(k).isdigit())
        stacked_ = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[layers[str(i)] for i in range(spec.first, n)])
        if not spec.stack:
            return stacked_
        out = {k: v for k, v in layers.items() if not (str(k).isdigit() and int(k) >= spec.first)}
        out[spec.stack] = stacked_
        return out
    return _map_encoders(params, stack, stacks)


def is_scanned(params, stacks: tuple = (BERT_LAYERS,)) -> bool:
    """Whether an encoder's layers are stacked (scanned); False without layers."""
    return any(spec.is_scanned(parent[spec.container]) for parent, spec in _find_layers(params, stacks))
