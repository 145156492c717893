"""State dict -> jaxbert params, one tensor at a time, against the table.

The key sets are matched before any tensor is read (so ``strict`` refuses a
checkpoint without reading its data); then each tensor is shape-checked,
transformed and placed, and dropped. Peak memory is the params plus about one
tensor.
"""

from __future__ import annotations

import re
import time
from typing import Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.model.bert.config import BertConfig, bert_class_name
from jaxbert.model.classes import build_model, dummy_inputs
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import unflatten
from jaxbert.model.registry import head
from jaxbert.convert.readers import tensor_to_numpy
from jaxbert.convert.result import ConversionError, ConversionReport
from jaxbert.convert.safetensors_io import aligned_empty, is_aligned
from jaxbert.convert.table import LEGACY_LEAVES, table_for, to_flax
from jaxbert.model.bert.table import Table

# A load that finds fewer of the model's tensors than this share is refused: the
# checkpoint is of another architecture (a head or two may be missing, not the body).
MIN_MATCHED = 0.5
_LAYER = re.compile(r"(?:^|\.)(?:encoder\.layer|layers)\.(\d+)\.")  # BERT's and ModernBERT's layer keys


def check_layer_count(keys: list[str], config: BertConfig, source: str) -> None:
    """Refuse a config with more layers than the checkpoint before anything is built for it."""
    found = {int(m.group(1)) for m in map(_LAYER.search, keys) if m}
    if found and config.num_hidden_layers > max(found) + 1:
        raise ConversionError(f"{source}: the config asks for num_hidden_layers={config.num_hidden_layers}, "
                              f"the checkpoint holds {max(found) + 1} layers")


def _normalise(key: str, table: Table, ckpt_has_prefix: bool) -> tuple[str | None, str]:
    """A checkpoint key -> (key in the table's naming, or None, and why not)."""
    head, _, leaf = key.rpartition(".")
    if leaf in LEGACY_LEAVES:
        key = f"{head}.{LEGACY_LEAVES[leaf]}"
    if key.endswith("embeddings.position_ids") or key.endswith("embeddings.token_type_ids"):
        return None, "buffer, recomputed by the model"
    family_prefix = table.spec.family.prefix + "."
    if table.prefix and not ckpt_has_prefix and key.startswith(table.base_modules):
        key = table.prefix + key  # a base-model checkpoint into a head class
    elif not table.prefix and key.startswith(family_prefix):
        key = key[len(family_prefix):]  # a head checkpoint into the base model
    return key, ""


def _unused_reason(key: str, table: Table) -> str:
    if ".pooler." in f".{key}":
        return f"{table.model_class} has no pooler"
    if ".crossattention." in key:
        return f"{table.model_class} has no cross-attention here (config.add_cross_attention or class)"
    if ".distance_embedding." in key:
        return f"config.position_embedding_type is {table.config.position_embedding_type!r}"
    family = getattr(getattr(table, "spec", None), "family", None)  # a BERT-built family's naming
    if key.startswith("lm_head.") and family is not None and not family.mlm_decoder.startswith("lm_head."):
        return "a BertGeneration head (decoder without a transform layer); no jaxbert class has it"
    if key.startswith(table.spec.family.mlm_decoder + ".weight"):
        return "config ties the decoder to the word embeddings, and no MLM head uses it"
    return f"no {table.model_class} param for it"


def match_keys(keys: Iterable[str], table: Table) -> tuple[dict, list, list]:
    """Match checkpoint keys to the table before reading data.

    Returns (actions: ckpt key -> ("load" | "tie", table key), ignored, unused)
    where "tie" means: check it equals the tensor loaded for the table key.
    """
    keys = list(keys)
    has_prefix = any(k.startswith(table.spec.family.prefix + ".") for k in keys)
    actions, ignored, unused, claimed = {}, [], [], {}
    aliases = []
    for key in keys:
        norm, why = _normalise(key, table, has_prefix)
        if norm is None:
            ignored.append((key, why))
        elif norm in table.by_key:
            if norm in claimed:  # e.g. both gamma and weight: must agree
                actions[key] = ("tie", norm)
            else:
                actions[key], claimed[norm] = ("load", norm), key
        elif norm in table.aliases:
            aliases.append((key, table.aliases[norm]))
        else:
            unused.append((key, _unused_reason(norm, table)))
    for key, target in aliases:  # tied copies: checked, or the only source of their target
        if target in claimed:
            actions[key] = ("tie", target)
        else:
            actions[key], claimed[target] = ("load", target), key
    return actions, ignored, unused


def state_dict_to_params(state_dict: Mapping | Iterable, config: BertConfig, model_class: str, *,
                         scan_layers: bool = False, dtype=None, strict: bool = False,
                         add_pooling_layer: bool | None = None, keys: list[str] | None = None,
                         source: str = "state dict", seed: int = 0,
                         adopt_buffers: bool = False, shapes: Mapping | None = None,
                         ) -> tuple[dict, ConversionReport]:
    """transformers' state dict -> jaxbert params for ``model_class``.

    Args:
      state_dict: key -> array (NumPy, torch or anything np.asarray takes), or an
        iterable of (key, array) pairs together with ``keys`` (streamed).
      config: the model config; model_class: a name in jaxbert.MODEL_CLASSES (or a Roberta* name).
      scan_layers: build the scanned layout (layer params stacked on axis 0).
      dtype: cast every param to it; None keeps each tensor's checkpoint dtype.
      strict: refuse missing params and unused tensors instead of warning.
      add_pooling_layer: BertModel without a pooler when False.
      adopt_buffers: let params take over the given arrays where their layout
        allows instead of copying (for freshly read tensors nobody else holds).
      shapes: key -> shape (PyTorch layout) that the source declares before reading
        (a file's header or index); checked against the model before any tensor is read.
    Returns:
      (params, report): params is the nested dict of NumPy arrays that goes in
      ``module.apply({'params': params}, ...)``; missing params are initialised
      as ``module.init`` would (seeded) and listed in ``report.missing``.
    Raises:
      ConversionError: shape mismatches (all of them, with expected and found
        shapes), a weight that is not floating point, a key given twice, tied
        tensors that differ, or under ``strict`` any missing/unused key.
    """
    t0 = time.perf_counter()
    if keys is None:
        keys = list(state_dict.keys())
        items = ((k, state_dict[k]) for k in keys)
    else:
        items = state_dict
    check_layer_count(keys, config, source)  # before the table: its size follows the config
    table = table_for(config, model_class, scan_layers, add_pooling_layer)
    actions, ignored, unused = match_keys(keys, table)
    report = ConversionReport(source, model_class, ignored=ignored, unused=unused)
    loaded_keys = {target for action, target in actions.values() if action == "load"}
    missing = [e for e in table.entries if e.key not in loaded_keys]
    if len(loaded_keys) < MIN_MATCHED * len(table.entries):
        seen = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "") if keys else "no tensors at all"
        raise ConversionError(
            f"{source}: only {len(loaded_keys)} of the {len(table.entries)} {model_class} tensors are in it "
            f"(it holds {seen}); not a checkpoint of this model")
    if strict and (missing or unused):
        lines = [f"{source} does not match {model_class} (strict=True):"]
        lines += [f"  missing {e.key} -> {'/'.join(e.path)} {list(e.torch_shape)}" for e in missing]
        lines += [f"  unused {k}: {why}" for k, why in unused]
        raise ConversionError("\n".join(lines))

    dtype = None if dtype is None else np.dtype(dtype)
    report.cast = None if dtype is None else dtype.name
    flat, mismatches, pending, done, seen, not_float = {}, [], {}, set(), set(), []
    declared = {k: tuple(shapes[k]) for k in actions if shapes and k in shapes}
    for key, shape in declared.items():  # before reading: a declared shape may be huge
        _check_shape(key, shape, table.by_key[actions[key][1]], model_class, mismatches)
    if mismatches:
        raise ConversionError(f"shape mismatch between {source} and {model_class} "
                              f"({config.hidden_size=}, {config.vocab_size=}):\n" + "\n".join(mismatches))
    for key, value in items:
        if key in seen:  # e.g. one key in two shards: the later would replace the earlier
            raise ConversionError(f"{source}: {key} is given twice (in two files or shards?); "
                                  "refusing to pick one")
        seen.add(key)
        if key not in actions:
            continue
        action, target = actions[key]
        entry = table.by_key[target]
        array = tensor_to_numpy(value)
        if not _check_shape(key, array.shape, entry, model_class, mismatches):
            continue
        if not array.dtype.name.startswith(("float", "bfloat")):
            not_float.append((key, array.dtype.name))
            continue
        if action == "tie":
            if target in done:
                _check_tied(key, target, array, flat[entry.path], entry, source)
                report.tied.append((key, target))
            else:  # hold it until its target is read
                pending.setdefault(target, []).append((key, array))
            continue
        report.dtypes[array.dtype.name] += 1
        _place(flat, table, entry, to_flax(entry, array), dtype, adopt_buffers)
        report.loaded.append(target)
        done.add(target)
        for tie_key, tie_array in pending.pop(target, []):
            _check_tied(tie_key, target, tie_array, flat[entry.path], entry, source)
            report.tied.append((tie_key, target))
        del array, value
    if not_float and not report.dtypes:
        raise ConversionError(f"{source}: every tensor is {', '.join(sorted({d for _, d in not_float}))}; model "
                              "weights are floating point, so this is not a checkpoint to convert")
    if not_float:
        key, dt = not_float[0]
        more = f" (and {len(not_float) - 1} more)" if len(not_float) > 1 else ""
        raise ConversionError(f"{source}: {key} is {dt}{more}; it is a model weight, which is floating point")
    if mismatches:
        raise ConversionError(f"shape mismatch between {source} and {model_class} "
                              f"({config.hidden_size=}, {config.vocab_size=}):\n" + "\n".join(mismatches))
    never_read = sorted(loaded_keys - done)
    if never_read:
        raise ConversionError(f"{source}: listed but never read (a shard without them?): {never_read}")
    if missing:
        fill_dtype = dtype or _dominant(report) or np.dtype(np.float32)
        init = init_leaves(config, model_class, scan_layers, add_pooling_layer,
                           {e.path for e in missing}, fill_dtype, seed)
        for e in missing:
            _place(flat, table, e, init[e.path][e.layer] if e.layer is not None else init[e.path], fill_dtype,
                   False)
        report.missing = [(p, table.leaf_shapes[p]) for p in dict.fromkeys(e.path for e in missing)]
    report.seconds = time.perf_counter() - t0
    return unflatten(flat), report


def _check_shape(key: str, shape: tuple, entry, model_class: str, mismatches: list) -> bool:
    if tuple(shape) == entry.torch_shape:
        return True
    mismatches.append(f"  {key}: checkpoint {list(shape)}, {model_class} expects "
                      f"{list(entry.torch_shape)} ({'/'.join(entry.path)})")
    return False


def _place(flat: dict, table: Table, entry, array: np.ndarray, dtype, adopt: bool) -> None:
    """Put one tensor (Flax layout) into its leaf; every leaf is 64-byte aligned (see aligned_empty)."""
    dtype = dtype or array.dtype
    if entry.layer is None:
        if adopt and array.dtype == dtype and is_aligned(array):
            flat[entry.path] = array  # a fresh read buffer in the right layout: adopt it
        else:
            flat[entry.path] = aligned_empty(array.shape, dtype)
            flat[entry.path][...] = array
        return
    if entry.path not in flat:
        flat[entry.path] = aligned_empty(table.leaf_shapes[entry.path], dtype)
    flat[entry.path][entry.layer] = array


def _check_tied(key, target, array, param, entry, source):
    param = param[entry.layer] if entry.layer is not None else param
    if not np.array_equal(to_flax(entry, array).astype(param.dtype), param):
        hint = (" Set tie_word_embeddings to false in config.json to load the decoder as its own weight."
                if key.endswith("decoder.weight") else "")
        raise ConversionError(f"{source}: {key} is tied to {target} but holds different values.{hint}")


def _dominant(report: ConversionReport):
    floats = [(n, d) for d, n in report.dtypes.items() if d.startswith(("float", "bfloat"))]
    return np.dtype(max(floats, key=lambda nd: nd[0])[1]) if floats else None


def init_leaves(config, model_class, scan_layers, add_pooling_layer, paths, dtype, seed=0) -> dict:
    """Fresh params at ``paths``, as ``module.init`` makes them; jit drops the rest of the init."""
    options = ModelOptions(param_dtype=dtype, scan_layers=scan_layers)
    kwargs = {}
    pooling = {"add_pooling_layer": add_pooling_layer} if add_pooling_layer is not None else {}
    module = build_model(model_class, config, options, **pooling)
    ids, types = dummy_inputs(model_class, 1, 4)
    # cross-attention is BERT's (a config of a family without it has no such field)
    if getattr(config, "add_cross_attention", False) and head(bert_class_name(model_class)).cross_attention:
        kwargs["encoder_hidden_states"] = jnp.zeros((1, 4, config.hidden_size), jnp.float32)
    paths = sorted(paths)

    def pick(key):
        params = module.init(key, ids, types, **kwargs)["params"]
        out = []
        for path in paths:
            node = params
            for name in path:
                node = node[name]
            out.append(node)
        return out

    values = jax.jit(pick)(jax.random.PRNGKey(seed))
    return {p: np.asarray(v) for p, v in zip(paths, values)}
