"""A larger model initialised from a smaller one of its family by centre tiling.

ModernBERT-large started from ModernBERT-base's weights this way (Warner et al. 2024, "tile
weights from middle"): each larger param is filled by repeating the smaller one along every
axis, placed so that the smaller one sits at the centre. On an axis growing from n to m the
larger param's index i reads the smaller one's (i - (m - n) // 2) mod n, so the block
[(m - n) // 2, (m - n) // 2 + n) is the source itself and the rims hold its wrapped-round
neighbours. A fused projection (ModernBERT's Wqkv: q, k and v side by side along the output
axis) is tiled block by block, so q's columns are filled from q's (the family names them:
``Family.fused_outputs``).

Depth: the larger model's first n layers are the smaller model's n; each further layer
repeats one of the top layers, counted back from the last (28 from 22: layers 22..27 are
16..21), so the stack keeps its order and, where the extra count is a multiple of the
global-attention period, each layer keeps its attention kind.
"""

from __future__ import annotations

import re

import numpy as np

# A per-layer param path: '.../layer/3/...' (BERT) or '.../layers/3/...' (ModernBERT).
_LAYER = re.compile(r"(^|/)(layers?)/(\d+)(/|$)")


def centre_tile(src: np.ndarray, shape: tuple, parts: int = 1) -> np.ndarray:
    """src repeated along every axis to `shape`, src at the centre; an axis that shrinks is cropped
    about its centre. parts > 1: the last axis is that many equal blocks (a fused projection),
    each tiled to its share of shape[-1]."""
    src = np.asarray(src)
    if len(shape) != src.ndim:
        raise ValueError(f"cannot tile a {src.ndim}-d param of shape {src.shape} to {tuple(shape)}")
    if parts > 1:
        if src.shape[-1] % parts or shape[-1] % parts:
            raise ValueError(f"a fused param of shape {src.shape} -> {tuple(shape)}: the last axis does not "
                             f"split into {parts} blocks")
        out = (*shape[:-1], shape[-1] // parts)
        return np.concatenate([centre_tile(b, out) for b in np.split(src, parts, axis=-1)], axis=-1)
    index = [(np.arange(m) - (m - n) // 2) % n for n, m in zip(src.shape, shape)]
    return src[np.ix_(*index)]


def source_layer(layer: int, layers: int, source_layers: int) -> int:
    """The smaller model's layer that initialises `layer` of `layers` (see the module docstring)."""
    if layer < source_layers:
        return layer
    return source_layers - 1 - (layers - 1 - layer) % source_layers


def tile_params(fresh: dict, loaded: dict, fused_outputs: dict | None = None) -> dict:
    """loaded (flat, '/'-separated, per-layer layout) brought to fresh's shapes and layer count:
    for every fresh key whose (layer-mapped) source key loaded has, the source centre-tiled to the
    fresh shape. Keys the source lacks are left out (the caller keeps fresh's values)."""
    fused_outputs = fused_outputs or {}
    counts = {}
    for table in (fresh, loaded):
        found = {}
        for key in table:
            m = _LAYER.search(key)
            if m:
                found[key[:m.start(3)]] = max(found.get(key[:m.start(3)], 0), int(m.group(3)) + 1)
        counts[id(table)] = found
    out = {}
    for key, value in fresh.items():
        m, source = _LAYER.search(key), key
        if m:
            stack = key[:m.start(3)]
            have = counts[id(loaded)].get(stack)
            if not have:
                continue
            layer = source_layer(int(m.group(3)), counts[id(fresh)][stack], have)
            source = f"{stack}{layer}{key[m.end(3):]}"
        if source not in loaded:
            continue
        parts = fused_outputs.get(key.split("/")[-2], 1) if "/" in key else 1
        out[key] = centre_tile(loaded[source], tuple(np.shape(value)), parts)
    return out
