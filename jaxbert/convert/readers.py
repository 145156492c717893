"""Checkpoint sources, each read as state-dict keys and one tensor at a time.

Every source speaks transformers' state-dict names and PyTorch layouts
(Linear weights [out, in]); Flax sources (HF ``flax_model.msgpack``, jaxbert
directories) are renamed and given transposed *views*, so nothing is copied
on the way.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path
from typing import Iterator

import ml_dtypes
import numpy as np

from jaxbert import fs

from jaxbert.convert.report import ConversionError
from jaxbert.convert.safetensors_io import SafetensorsError, SafetensorsReader
from jaxbert.convert.table import flax_name_to_key

JAXBERT_META = "jaxbert.json"
PARAMS_DIR = "params"
# Looked for in this order in a directory.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "flax_model.msgpack")


class Source:
    """A checkpoint: ``keys()`` up front, then ``items()`` streams (key, array)."""

    description: str = ""
    config_path: Path | None = None
    meta: dict = {}

    def keys(self) -> list[str]:
        raise NotImplementedError

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        raise NotImplementedError


class SafetensorsSource(Source):
    def __init__(self, files: list[Path], description: str):
        self.files, self.description = files, description
        self._keys = []
        for f in files:  # opening checks every header against its file size
            try:
                with SafetensorsReader(f) as r:
                    self._keys += r.keys()
            except SafetensorsError as e:
                raise ConversionError(str(e)) from e

    def keys(self):
        return list(self._keys)

    def items(self):
        for f in self.files:
            try:
                with SafetensorsReader(f) as r:
                    for k in r.keys():
                        yield k, r.get(k)
            except SafetensorsError as e:
                raise ConversionError(str(e)) from e


def torch_load(path: Path) -> dict:
    """A PyTorch state dict, loaded weights-only: tensors and plain containers, never code."""
    try:
        import torch
    except ImportError as e:
        raise ConversionError(f"{path}: reading a PyTorch checkpoint needs torch (pip install torch), "
                              "or convert it to safetensors first") from e
    try:
        # mmap keeps a zip checkpoint on disk until each tensor is read.
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0]
        raise ConversionError(
            f"{path}: refused to unpickle it: it holds objects other than tensors (weights_only load). "
            f"Only plain state dicts are read; a pickle can run code when loaded. ({first})") from e
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, KeyError, EOFError, ...
        raise ConversionError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r})") from e
    for wrapper in ("state_dict", "model"):  # training scripts often nest it
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict) or not all(isinstance(k, str) for k in obj):
        raise ConversionError(f"{path}: expected a state dict (str -> tensor), found {type(obj).__name__}")
    return obj


def tensor_to_numpy(t) -> np.ndarray:
    """A torch tensor (or array) -> a NumPy array that owns its memory; bf16 kept bit for bit."""
    if isinstance(t, np.ndarray):
        return t
    if not hasattr(t, "detach"):
        return np.asarray(t)
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # NumPy has no bf16; reinterpret the bits
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


class TorchSource(Source):
    """.bin/.pt files; a sharded set gets its keys from the index, so each shard loads once."""

    def __init__(self, files: list[Path], description: str, keys: list[str] | None = None):
        self.files, self.description = files, description
        self._loaded = None
        if keys is None:  # one file: load it now (mmapped) and keep it for items()
            self._loaded = torch_load(files[0])
            keys = [k for k, v in self._loaded.items() if hasattr(v, "shape")]
        self._keys = keys

    def keys(self):
        return list(self._keys)

    def items(self):
        for f in self.files:
            sd, self._loaded = (self._loaded if self._loaded is not None else torch_load(f)), None
            for k in list(sd):
                v = sd.pop(k)  # drop each tensor as soon as it is converted
                if hasattr(v, "shape"):
                    yield k, tensor_to_numpy(v)


class TreeSource(Source):
    """A nested dict of Flax params (HF msgpack, jaxbert Orbax); scanned layers are split."""

    def __init__(self, tree: dict, description: str):
        self.description = description
        self._flat = dict(_flatten_per_layer(tree))

    def keys(self):
        return list(self._flat)

    def items(self):
        for k in list(self._flat):
            yield k, self._flat.pop(k)


def _flatten_per_layer(tree, path=()) -> Iterator[tuple[str, np.ndarray]]:
    """(state-dict key, array) of a Flax tree; a scanned layer stack is split leaf by
    leaf, all layers of one leaf together, so each stacked array is released
    as soon as its last layer is consumed."""
    for name, value in tree.items():
        if not isinstance(value, dict):
            yield _as_state_dict_item(path + (name,), np.asarray(value))
        elif name == "layer" and value and not all(k.isdigit() for k in value):
            for sub, stacked in _flatten_per_layer_paths(value):
                stacked = np.asarray(stacked)
                for i in range(stacked.shape[0]):
                    yield _as_state_dict_item(path + (name, str(i)) + sub, stacked[i])
        else:
            yield from _flatten_per_layer(value, path + (name,))


def _flatten_per_layer_paths(tree, path=()):
    for name, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten_per_layer_paths(value, path + (name,))
        else:
            yield path + (name,), value


def _as_state_dict_item(path: tuple, value: np.ndarray) -> tuple[str, np.ndarray]:
    key, transpose = flax_name_to_key(path)
    return key, (value.T if transpose and value.ndim == 2 else value)


def read_msgpack(path: Path) -> dict:
    from flax import serialization
    try:
        tree = serialization.msgpack_restore(path.read_bytes())
    except Exception as e:  # noqa: BLE001 - msgpack raises several unrelated types
        raise ConversionError(f"{path}: not a readable Flax msgpack checkpoint ({type(e).__name__}: {e})") from e
    if not isinstance(tree, dict):
        raise ConversionError(f"{path}: expected a dict of params, found {type(tree).__name__}")
    return tree.get("params", tree)


def read_orbax(directory: Path) -> dict:
    """A jaxbert params tree in the saved dtypes, as NumPy views of host (CPU) jax Arrays.

    Restoring jax Arrays onto the CPU device and viewing them costs no copy, and
    their buffers are aligned so the loader can adopt them as params.
    """
    import orbax.checkpoint as ocp
    import jax
    cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    try:
        with ocp.PyTreeCheckpointer() as ckpt:
            meta = ckpt.metadata(directory.absolute()).item_metadata.tree
            args = jax.tree_util.tree_map(lambda _: ocp.ArrayRestoreArgs(sharding=cpu), meta)
            tree = ckpt.restore(directory.absolute(), restore_args=args)
        return jax.tree_util.tree_map(np.asarray, tree)
    except Exception as e:  # noqa: BLE001 - orbax/tensorstore raise many types
        raise ConversionError(f"{directory}: cannot restore the Orbax params ({type(e).__name__}: {e})") from e


def _index_files(index: Path) -> tuple[list[Path], list[str]]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConversionError(f"{index}: not a readable checkpoint index ({type(e).__name__}: {e})") from e
    files = [index.parent / f for f in dict.fromkeys(weight_map.values())]
    for f in files:
        if not f.exists():
            raise ConversionError(f"{index} names the shard {f.name}, which does not exist ({f})")
    return files, list(weight_map)


def open_source(path: str | Path) -> Source:
    """A directory (jaxbert, or HF with one of WEIGHT_FILES) or a single weights file."""
    path = fs.local_copy(path)  # a URL is read from a local copy
    if not path.exists():
        raise ConversionError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / JAXBERT_META).exists():
            meta = json.loads((path / JAXBERT_META).read_text())
            src = TreeSource(read_orbax(path / PARAMS_DIR), str(path))
            src.meta = meta
            src.config_path = path / "config.json"
            return src
        for name in WEIGHT_FILES:
            if (path / name).exists():
                src = open_source(path / name)
                src.description = str(path / name)
                return src
        raise ConversionError(f"{path}: no checkpoint found; looked for {JAXBERT_META}, "
                              + ", ".join(WEIGHT_FILES))
    name = path.name
    if name.endswith(".index.json"):
        files, keys = _index_files(path)
        if all(f.suffix == ".safetensors" for f in files):
            src = SafetensorsSource(files, str(path))
        else:
            src = TorchSource(files, str(path), keys)
    elif path.suffix == ".safetensors":
        src = SafetensorsSource([path], str(path))
    elif path.suffix in (".bin", ".pt", ".pth"):
        src = TorchSource([path], str(path))
    elif path.suffix == ".msgpack":
        src = TreeSource(read_msgpack(path), str(path))
    else:
        raise ConversionError(f"{path}: unknown checkpoint type; expected a directory, .safetensors, "
                              ".bin, .pt, .msgpack or an .index.json")
    cfg = path.parent / "config.json"
    src.config_path = cfg if cfg.exists() else None
    return src
