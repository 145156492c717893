"""A larger model initialised from a smaller one of its family by centre tiling.

ModernBERT-large started from ModernBERT-base's weights this way (Warner et al. 2024, "tile
weights from middle"): each larger param is filled by repeating the smaller one along every
axis, placed so that the smaller one sits at the centre. On an axis growing from n to m the
larger param's index i reads the smaller one's (i - (m - n) // 2) mod n, so the block
[(m - n) // 2, (m - n) // 2 + n) is the source itself and the rims hold its wrapped-round
neighbours. A fused projection (ModernBERT's Wqkv: q, k and v side by side along the output
axis) is tiled block by block, so q's columns are filled from q's (the family names them:
``Family.fused_outputs``).

Tables (an embedding's rows: token ids, positions, token types; and the vocabulary axis of an MLM
head's decoder and bias) are not tiled along their rows: row i is a token or a position, so it is
copied to row i; its feature axis is centre-tiled like any other. Rows the source lacks (a longer
position table, a larger vocabulary) keep the larger model's fresh initialisation, and the run's
log names them.

Depth: the larger model's first n layers are the smaller model's n; each further layer
repeats one of the top layers, counted back from the last (28 from 22: layers 22..27 are
16..21), so the stack keeps its order and, where the extra count is a multiple of the
global-attention period, each layer keeps its attention kind.

The source may not be larger than the model along any axis, nor deeper: tiling would crop it, so
that is refused (TilingError), naming the param.
"""

from __future__ import annotations

import re

import numpy as np

from jaxbert.errors import InputError

# A per-layer param path: '.../layer/3/...' (BERT) or '.../layers/3/...' (ModernBERT).
_LAYER = re.compile(r"(^|/)(layers?)/(\d+)(/|$)")


class TilingError(InputError):
    """A source that centre tiling cannot bring to the model: larger along an axis, or deeper."""


def centre_tile(src: np.ndarray, shape: tuple, parts: int = 1, tables: tuple = (), fill=None) -> np.ndarray:
    """src repeated along every axis to `shape`, src at the centre. parts > 1: the last axis is that
    many equal blocks (a fused projection), each tiled to its share of shape[-1]. `tables`: axes whose
    index is a row of a table (a token, a position): row i of src is copied to row i, and rows past
    src's are `fill`'s (an array of `shape`; zeros when None). ValueError for an axis that shrinks."""
    src = np.asarray(src)
    if len(shape) != src.ndim:
        raise ValueError(f"cannot tile a {src.ndim}-d param of shape {src.shape} to {tuple(shape)}")
    if any(m < n for n, m in zip(src.shape, shape)):
        raise ValueError(f"the source's shape {src.shape} is larger than {tuple(shape)} along an axis")
    tables = {a % src.ndim for a in tables}
    if parts > 1:
        if src.shape[-1] % parts or shape[-1] % parts:
            raise ValueError(f"a fused param of shape {src.shape} -> {tuple(shape)}: the last axis does not "
                             f"split into {parts} blocks")
        if src.ndim - 1 in tables:
            raise ValueError("a fused projection's output axis is not a table")
        out = (*shape[:-1], shape[-1] // parts)
        blocks = np.split(np.asarray(fill), parts, axis=-1) if fill is not None else [None] * parts
        return np.concatenate([centre_tile(b, out, tables=tuple(tables), fill=f)
                               for b, f in zip(np.split(src, parts, axis=-1), blocks)], axis=-1)
    index = [np.arange(n) if a in tables else (np.arange(m) - (m - n) // 2) % n
             for a, (n, m) in enumerate(zip(src.shape, shape))]
    tiled = src[np.ix_(*index)]
    if tiled.shape == tuple(shape):
        return tiled
    out = np.array(fill, dtype=src.dtype) if fill is not None else np.zeros(shape, src.dtype)
    out[tuple(slice(0, k) for k in tiled.shape)] = tiled
    return out


def source_layer(layer: int, layers: int, source_layers: int) -> int:
    """The smaller model's layer that initialises `layer` of `layers` (see the module docstring)."""
    if layers < source_layers:
        raise ValueError(f"a {source_layers}-layer source does not tile into {layers} layers")
    if layer < source_layers:
        return layer
    return source_layers - 1 - (layers - 1 - layer) % source_layers


def table_axes(key: str, src_shape: tuple, vocab: tuple[int, int] | None) -> tuple:
    """The axes of param `key` that index a table's rows: an embedding's first axis (Flax's
    nn.Embed names its table 'embedding'), and outside the layers an axis that is the vocabulary
    in both models (vocab: the source's and the model's vocabulary sizes, when they differ):
    an MLM head's untied decoder and its bias."""
    if key.rsplit("/", 1)[-1] == "embedding":
        return (0,)
    if vocab is None or vocab[0] == vocab[1] or _LAYER.search(key):
        return ()
    return tuple(a for a, n in enumerate(src_shape) if n == vocab[0])


def tile_params(fresh: dict, loaded: dict, fused_outputs: dict | None = None, vocab_key: str | None = None,
                notes: list | None = None) -> dict:
    """loaded (flat, '/'-separated, per-layer layout) brought to fresh's shapes and layer count:
    for every fresh key whose (layer-mapped) source key loaded has, the source centre-tiled to the
    fresh shape, table rows at their own index (see the module docstring). Keys the source lacks are
    left out (the caller keeps fresh's values). vocab_key: the word embeddings' key (their row counts
    tell a vocabulary axis). `notes` gets one line per table that grew (its new rows stay fresh).
    TilingError, naming the param, for a source larger or deeper than the model."""
    fused_outputs = fused_outputs or {}
    counts = {}
    for table in (fresh, loaded):
        found = {}
        for key in table:
            m = _LAYER.search(key)
            if m:
                found[key[:m.start(3)]] = max(found.get(key[:m.start(3)], 0), int(m.group(3)) + 1)
        counts[id(table)] = found
    for stack, have in counts[id(loaded)].items():
        want = counts[id(fresh)].get(stack)
        if want is not None and have > want:
            raise TilingError(f"init_tile: the source has {have} layers in {stack.rstrip('/')}, the model {want}; "
                              "tiling fills a larger model from a smaller one and never drops layers")
    vocab = None
    if vocab_key in fresh and vocab_key in loaded:
        vocab = (np.shape(loaded[vocab_key])[0], np.shape(fresh[vocab_key])[0])
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
        src, shape = np.asarray(loaded[source]), tuple(np.shape(value))
        if src.ndim == len(shape) and any(n > k for n, k in zip(src.shape, shape)):
            raise TilingError(f"init_tile: param {source} of the source has shape {src.shape}, larger than the "
                              f"model's {shape}; tiling fills a larger model from a smaller one and never crops")
        parts = fused_outputs.get(key.split("/")[-2], 1) if "/" in key else 1
        tables = table_axes(key, src.shape, vocab)
        try:
            out[key] = centre_tile(src, shape, parts, tables, fill=np.asarray(value))
        except ValueError as e:
            raise TilingError(f"init_tile: param {key}: {e}") from None
        grown = [(a, src.shape[a], shape[a]) for a in tables if shape[a] > src.shape[a]]
        if notes is not None and grown:
            notes.append(f"init_tile: {key}: " + "; ".join(
                f"rows {n}..{k - 1} of axis {a} are new (the source has {n}) and keep their fresh initialisation"
                for a, n, k in grown) + "; the source's rows keep their index")
    return out
