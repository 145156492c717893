"""Checkpoint sources, each read as state-dict keys and one tensor at a time.

Every source speaks transformers' state-dict names and PyTorch layouts
(Linear weights [out, in]); Flax sources (HF ``flax_model.msgpack``, jaxbert
directories) are renamed and given transposed *views*, so nothing is copied
on the way.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path
from types import MappingProxyType
from typing import Iterator, Mapping

import jax
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization

from jaxbert import fs
from jaxbert.errors import require
from jaxbert.model.families import FAMILIES, family_of_params
from jaxbert.model.params import iter_flat
from jaxbert.convert.result import ConversionError
from jaxbert.convert.safetensors_io import SafetensorsError, SafetensorsReader
from jaxbert.convert.table import flax_name_to_key
from jaxbert.convert.tf_checkpoint import TFCheckpointSource, checkpoint_prefix

JAXBERT_META = "jaxbert.json"
PARAMS_DIR = "params"
# Looked for in this order in a directory.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "flax_model.msgpack")


class Source:
    """A checkpoint: ``keys()`` up front, then ``items()`` streams (key, array)."""

    description: str = ""
    config_path: Path | None = None
    meta: Mapping = MappingProxyType({})  # jaxbert.json of a jaxbert directory; read-only when absent
    skipped: tuple = ()  # (name, reason) of tensors that are not weights (optimizer slots)

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
    torch = require("torch", "torch", f"reading the PyTorch checkpoint {path}")
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
        self.description, self._flat, origin = description, {}, {}
        for key, value, name in _flatten_per_layer(tree, stacks=_stacks(tree)):  # two params for one key: refused
            if key in origin:
                raise ConversionError(f"{description}: {origin[key]} and {name} both map to {key}; one is dropped")
            self._flat[key], origin[key] = value, name

    def keys(self):
        return list(self._flat)

    def items(self):
        for k in list(self._flat):
            yield k, self._flat.pop(k)


def _stacks(tree=None) -> dict:
    """Each registered family's layer container -> its layout (BERT's encoder/layer, ModernBERT's
    layers/scan), read when asked: a family registered after import counts too. Given a tree, its own
    family's alone where the tree says which (ModernBERT's and EuroBERT's containers are both "layers")."""
    families = FAMILIES.values()
    if tree is not None:
        try:
            families = [family_of_params(tree)]
        except KeyError:  # no word embeddings to tell the family by: every family's layout
            pass
    return {f.layer_stack.container: f.layer_stack for f in families}


def _flatten_per_layer(tree, path=(), stacks=None) -> Iterator[tuple[str, np.ndarray, str]]:
    """(state-dict key, array, param path) of a Flax tree; a scanned layer stack is split leaf by
    leaf, all layers of one leaf together, so each stacked array is released
    as soon as its last layer is consumed."""
    stacks = _stacks() if stacks is None else stacks
    for name, value in tree.items():
        if not isinstance(value, dict):
            yield _as_state_dict_item(path + (name,), np.asarray(value))
        elif name in stacks and stacks[name].is_scanned(value):
            # one stacked leaf at a time, all its layers together, so each is released when consumed
            spec = stacks[name]
            for sub, leaf in iter_flat(value[spec.stack] if spec.stack else value):
                leaf = np.asarray(leaf)
                for i in range(leaf.shape[0]):
                    yield _as_state_dict_item(path + (name, str(spec.first + i)) + sub, leaf[i])
            if spec.stack:
                rest = {k: v for k, v in value.items() if k != spec.stack}
                yield from _flatten_per_layer(rest, path + (name,), stacks)
        else:
            yield from _flatten_per_layer(value, path + (name,), stacks)


def _as_state_dict_item(path: tuple, value: np.ndarray) -> tuple[str, np.ndarray, str]:
    key, transpose = flax_name_to_key(path)
    return key, (value.T if transpose and value.ndim == 2 else value), "/".join(path)


def read_msgpack(path: Path) -> dict:
    try:
        tree = serialization.msgpack_restore(path.read_bytes())
    except Exception as e:  # noqa: BLE001 - msgpack raises several unrelated types
        raise ConversionError(f"{path}: not a readable Flax msgpack checkpoint ({type(e).__name__}: {e})") from e
    if not isinstance(tree, dict):
        raise ConversionError(f"{path}: expected a dict of params, found {type(tree).__name__}")
    _check_names(tree, path)
    return tree.get("params", tree)


def _check_names(tree: dict, path: Path, prefix: str = "") -> None:
    """Every key of a params tree is a string (msgpack allows integers, floats, ...)."""
    for k, v in tree.items():
        if not isinstance(k, str):
            raise ConversionError(f"{path}: params key {prefix}{k!r} is a {type(k).__name__}, not a name")
        if isinstance(v, dict):
            _check_names(v, path, f"{prefix}{k}/")


def read_orbax(directory: Path) -> dict:
    """A jaxbert params tree in the saved dtypes, as NumPy views of host (CPU) jax Arrays.

    Restoring jax Arrays onto the CPU device and viewing them costs no copy, and
    their buffers are aligned so the loader can adopt them as params.
    """
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
    """The shards an index names (each inside the index's folder) and its keys."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConversionError(f"{index}: not a readable checkpoint index ({type(e).__name__}: {e})") from e
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ConversionError(f"{index}: weight_map must be a JSON object of tensor name -> shard file name, "
                              f"got {type(weight_map).__name__}")
    files = [_shard_path(index, name) for name in dict.fromkeys(weight_map.values())]
    suffixes = {f.suffix for f in files}
    if len(suffixes) > 1 or not suffixes <= {".safetensors", ".bin", ".pt", ".pth"}:
        raise ConversionError(f"{index}: shard files must all be .safetensors or all .bin/.pt, got {sorted(suffixes)}")
    return files, list(weight_map)


def _shard_path(index: Path, name: str) -> Path:
    """A shard named by an index: a relative path that stays inside the index's folder.

    Checked on the names, not on resolved links: a symlink inside the folder may
    point elsewhere (Hugging Face caches link to blobs), ``../x`` or ``/dev/zero`` may not.
    """
    norm = os.path.normpath(name)
    if not name or os.path.isabs(name) or norm == ".." or norm.startswith(".." + os.sep):
        raise ConversionError(f"{index} names the shard {name!r}, outside its folder; refusing to read it")
    f = index.parent / norm
    if not f.exists():
        raise ConversionError(f"{index} names the shard {name}, which does not exist ({f})")
    if not f.is_file():
        raise ConversionError(f"{index} names the shard {name}, which is not a regular file ({f})")
    return f


def _read_meta(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConversionError(f"{path}: not a readable jaxbert.json ({type(e).__name__}: {e})") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("model_class", ""), str):
        raise ConversionError(f"{path}: expected a JSON object with model_class, got {str(meta)[:80]}")
    return meta


def open_source(path: str | Path) -> Source:
    """A directory (jaxbert, HF with one of WEIGHT_FILES, or an original TensorFlow
    checkpoint with bert_config.json) or a single weights file / TF checkpoint prefix.
    A URL is read from a local copy."""
    path = fs.local_copy(path)
    tf_prefix = checkpoint_prefix(path) if not (path / JAXBERT_META).exists() and not any(
        (path / n).exists() for n in WEIGHT_FILES) else None
    if tf_prefix is not None:
        return TFCheckpointSource(tf_prefix)
    if not path.exists():
        raise ConversionError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / JAXBERT_META).exists():
            meta = _read_meta(path / JAXBERT_META)
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
                              + ", ".join(WEIGHT_FILES) + " and a TensorFlow *.index")
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
