"""jaxbert params -> a transformers state dict, a Hugging Face directory, or a jaxbert directory."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import re
from pathlib import Path
from typing import Iterator

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxbert.errors import InputError
from jaxbert.fs import atomic_write_text
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.params import flatten, is_scanned, unflatten
from jaxbert.model.families import family_of
from jaxbert.model.registry import spec_of
from jaxbert.convert.readers import JAXBERT_META, PARAMS_DIR
from jaxbert.convert.result import ConversionError
from jaxbert.convert.safetensors_io import write_safetensors
from jaxbert.convert.table import table_for, to_torch
from jaxbert.model.bert.table import Table

SAFE_NAME = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(size: int | str) -> int:
    """``"5GB"`` (10**9, as transformers counts), ``"500MiB"``, or a byte count."""
    if isinstance(size, int):
        return size
    m = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", str(size))
    if not m or m.group(2).upper() not in _UNITS:
        raise ConversionError(f"max_shard_size {size!r} is not a size such as '5GB' or '500MiB'")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _unwrap(params) -> dict:
    params = dict(params)
    return dict(params["params"]) if set(params) == {"params"} else params


def check_params(params, table: Table) -> dict:
    """Flat {path: leaf}, after checking the tree has exactly the table's leaves and shapes."""
    flat = flatten(_unwrap(params))
    problems = [f"  missing {'/'.join(p)} {list(s)}" for p, s in table.leaf_shapes.items() if p not in flat]
    problems += [f"  unexpected {'/'.join(p)} {list(np.shape(v))}" for p, v in flat.items()
                 if p not in table.leaf_shapes]
    problems += [f"  {'/'.join(p)}: params {list(np.shape(v))}, {table.model_class} expects "
                 f"{list(table.leaf_shapes[p])}" for p, v in flat.items()
                 if p in table.leaf_shapes and tuple(np.shape(v)) != table.leaf_shapes[p]]
    if problems:
        raise ConversionError(f"params do not fit {table.model_class} with this config:\n" + "\n".join(problems))
    return flat


def _table(params, config, model_class, add_pooling_layer=None) -> Table:
    """The key table for these params: the layout read from them, the family from the config."""
    family = family_of(config)
    scanned = is_scanned(_unwrap(params), (family.layer_stack,))
    if add_pooling_layer is None and spec_of(model_class).base and spec_of(model_class).pooler:
        add_pooling_layer = "pooler" in _unwrap(params)  # the base model without a pooler has none
    return table_for(config, model_class, scanned, add_pooling_layer)


def iter_state_dict(params, config: BertConfig, model_class: str, *, tied: bool = False,
                    add_pooling_layer: bool | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (state-dict key, NumPy array in PyTorch layout), one tensor at a time.

    Either param layout is accepted. With ``tied``, the tied copies transformers
    also lists in ``state_dict()`` (cls.predictions.decoder.weight/.bias) are
    yielded too; files leave them out, as transformers' own save does.
    """
    table = _table(params, config, model_class, add_pooling_layer)
    flat = check_params(params, table)
    for e in table.entries:
        leaf = flat[e.path]
        # Slicing before np.asarray moves one layer, not the stack, off an accelerator.
        yield e.key, to_torch(e, np.asarray(leaf if e.layer is None else leaf[e.layer]))
    if tied:
        for alias, target in table.aliases.items():
            e = table.by_key[target]
            yield alias, to_torch(e, np.asarray(flat[e.path]))


def params_to_state_dict(params, config: BertConfig, model_class: str, *, tied: bool = False,
                         add_pooling_layer: bool | None = None) -> dict[str, np.ndarray]:
    """jaxbert params (either layout) -> {state-dict key: NumPy array [PyTorch layout]}.

    The arrays are contiguous copies in the params' dtype (bf16 as ml_dtypes.bfloat16).
    """
    return {k: np.ascontiguousarray(v) for k, v in
            iter_state_dict(params, config, model_class, tied=tied, add_pooling_layer=add_pooling_layer)}


def hf_config(config: BertConfig, model_class: str, dtype_name: str | None) -> dict:
    data = config.to_dict()
    data["architectures"] = [config.class_name(model_class)]  # a RoBERTa config names Roberta* classes
    if dtype_name:
        # transformers 4.56+ writes "dtype", older ones "torch_dtype"; keep whichever is there.
        data["dtype" if "dtype" in data else "torch_dtype"] = dtype_name
    return data


def _write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _dtype_name(flat: dict) -> str | None:
    dtypes = {np.dtype(v.dtype).name for v in flat.values()}
    return dtypes.pop() if len(dtypes) == 1 else None


def write_hf(directory: str | Path, config: BertConfig, model_class: str, params, *,
             max_shard_size: int | str = "5GB", add_pooling_layer: bool | None = None) -> list[Path]:
    """A transformers directory: config.json + model.safetensors, or shards and an index.

    Tensors stream from the params to disk one at a time. Returns the weight files. A config that
    transformers 4.x would read as another model (ModernBERT layer types beyond its every-n
    pattern) is refused before anything is written.
    """
    conflict = getattr(config, "transformers4_conflict", lambda: None)()
    if conflict:
        raise InputError(f"{conflict}; not writing a config.json that transformers 4.x loads as another model")
    directory = _empty_dir(directory)
    limit = parse_size(max_shard_size)
    table = _table(params, config, model_class, add_pooling_layer)
    flat = check_params(params, table)
    specs = []
    for e in table.entries:
        leaf = flat[e.path]
        specs.append((e.key, e.torch_shape, np.dtype(leaf.dtype)))
    shards, size = [[]], 0
    for spec in specs:
        nbytes = math.prod(spec[1]) * spec[2].itemsize
        if shards[-1] and size + nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += nbytes
    names = ([SAFE_NAME] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    tensors = iter_state_dict(params, config, model_class, add_pooling_layer=add_pooling_layer)
    total = 0
    for name, shard in zip(names, shards):
        write_safetensors(directory / name, shard, itertools.islice(tensors, len(shard)))
        total += sum(math.prod(s) * d.itemsize for _, s, d in shard)
    if len(shards) > 1:
        weight_map = {k: name for name, shard in zip(names, shards) for k, _, _ in shard}
        _write_json(directory / SAFE_INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})
    _write_json(directory / "config.json", hf_config(config, model_class, _dtype_name(flat)))
    return [directory / n for n in names]


class _OcdbtMergeNote(logging.Filter):
    """Orbax's warning that it found no OCDBT checkpoint to merge: this save writes none (use_ocdbt=False)."""

    def filter(self, record) -> bool:
        return "Skipping merge of OCDBT checkpoints" not in record.getMessage()


@contextlib.contextmanager
def _no_ocdbt_merge_note():
    """That one absl warning (it names the temporary folder) off during jaxbert's own save; no other."""
    note, logger = _OcdbtMergeNote(), logging.getLogger("absl")
    logger.addFilter(note)
    try:
        yield
    finally:
        logger.removeFilter(note)


def write_jaxbert(directory: str | Path, config: BertConfig, model_class: str, params, *,
                  add_pooling_layer: bool | None = None) -> Path:
    """A jaxbert directory: config.json, jaxbert.json (class, layout) and params/ (Orbax)."""
    directory = _empty_dir(directory).absolute()
    table = _table(params, config, model_class, add_pooling_layer)
    flat = check_params(params, table)
    # Orbax writes jax Arrays with far less host memory than NumPy ones (on CPU,
    # device_put adopts the 64-byte-aligned buffers the loaders make), and
    # without OCDBT it streams each leaf to its own directory.
    tree = unflatten({p: jax.device_put(v) if isinstance(v, np.ndarray) else v for p, v in flat.items()})
    with _no_ocdbt_merge_note(), ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_ocdbt=False)) as ckpt:
        ckpt.save(directory / PARAMS_DIR, args=ocp.args.PyTreeSave(tree))
    del tree
    meta = {"format": "jaxbert", "version": 1, "model_class": model_class,
            "scan_layers": table.scan_layers, "dtype": _dtype_name(flat)}
    if add_pooling_layer is not None:
        meta["add_pooling_layer"] = add_pooling_layer
    _write_json(directory / "config.json", hf_config(config, model_class, _dtype_name(flat)))
    _write_json(directory / JAXBERT_META, meta)
    return directory


def _empty_dir(directory) -> Path:
    """The writers fill a new, empty directory and delete nothing: replacing an earlier output
    is fs.publish_dir's job (save_pretrained, convert and export build into one)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise InputError(f"{directory}: not empty; the writers fill a new directory "
                         "(save_pretrained replaces an earlier jaxbert output)")
    return directory
