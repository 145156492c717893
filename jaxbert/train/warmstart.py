"""Continued pretraining: start from existing weights instead of transformers' init.

``model.init_from`` may name anything ``jaxbert.from_pretrained`` reads (a
Hugging Face or jaxbert directory, a safetensors / PyTorch / msgpack file) or
a jaxbert training workdir (its newest checkpoint; this is how
bert-base-phase2 starts from phase 1). Params the source lacks, such as the
MLM head of a plain BertModel checkpoint, keep their fresh initialisation;
the run says which. A workdir whose run stopped before its last step is read
all the same, and the log gives its step and says that it did not finish.

The data must be tokenized as the source was trained: ``check_tokenizer``
compares the source's own tokenizer (beside its weights, or its run's) with
the one the data was prepared with, by the hash prepared data records (as
mixture sources are compared), and refuses another, even of the same size.
"""

from __future__ import annotations

import warnings

import numpy as np

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.convert import from_pretrained
from jaxbert.data.loader import DataCompatibilityError
from jaxbert.data.tokenizer import tokenizer_hash
from jaxbert.errors import InputError
from jaxbert.model.families import Family, family_of_class, family_of_params
from jaxbert.model.params import flatten, scan_params, unflatten, unscan_params
from jaxbert.train.tiling import tile_params


def check_tokenizer(init_from: str, tok, data_dir) -> None:
    """DataCompatibilityError when `init_from` ships a tokenizer (its own files, or its run's) other than
    `tok`, the tokenizer the data in `data_dir` was prepared with (check_fits has matched the two).
    A source without one, or one no longer there (a resumed run does not read it), is not checked."""
    try:
        own = workdir_lib.tokenizer_path(init_from)
        if own is None or not any((fs.as_path(own) / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
            return
        source_hash = tokenizer_hash(own)
    except (InputError, OSError):
        return
    data_hash = tokenizer_hash(tok)
    if source_hash != data_hash:
        where = ", ".join(map(str, data_dir)) if isinstance(data_dir, (list, tuple)) else data_dir
        raise DataCompatibilityError(
            f"model.init_from: {init_from} was trained with the tokenizer in {own} (sha256 {source_hash[:12]}), "
            f"but {where} was prepared with another (sha256 {data_hash[:12]}): its ids would mean other pieces "
            f"to the model; prepare the data with --tokenizer {own}")


def describe_source(path: str) -> str | None:
    """A line on a workdir source: its step, and whether its run finished; None for a model directory."""
    try:
        if not workdir_lib.is_workdir(path):
            return None
        step, meta = workdir_lib.newest_meta(fs.as_path(path))
    except (InputError, OSError):
        return None
    planned = (workdir_lib.saved_recipe(meta).get("train") or {}).get("steps")
    if isinstance(planned, int) and step < planned:
        return (f"init_from: {path} is at step {step:,} of the {planned:,} its recipe plans: its run did not "
                f"finish; starting from its step-{step:,} weights")
    return f"init_from: {path} at step {step:,}" + (" (its run finished)" if planned else "")


def load_source_params(path: str, model_class: str, log=None) -> dict:
    """Host params of `path` (anything from_pretrained reads, a workdir too) in the per-layer layout.
    `log` gets a workdir's step (and a word when its run did not finish)."""
    line = describe_source(path) if log is not None else None
    if line:
        log(line)
    with warnings.catch_warnings():  # merge() lists what was missing, in the run's log
        warnings.simplefilter("ignore")
        _, params, report = from_pretrained(str(path), model_class=model_class, strict=False,
                                            return_report=True)
    # from_pretrained initialised the params the checkpoint lacks: drop them, so the
    # run's own initialisation (its seed) fills them and the log names them.
    stack = family_of_class(model_class).layer_stack
    flat = flatten(unscan_params(params, (stack,)), sep="/")
    missing = set(report.missing_paths)
    return unflatten(
        {k: v for k, v in flat.items() if k not in missing and not _is_layer_of(k, missing, stack)}, sep="/")


def _is_layer_of(key: str, missing: set, stack) -> bool:
    """A per-layer key whose scanned form (the stack's path without the index) was reported missing."""
    parts = key.split("/")
    scanned = [stack.stack] if stack.stack else []
    return any(parts[i + 1].isdigit() and "/".join(parts[:i + 1] + scanned + parts[i + 2:]) in missing
               for i in range(len(parts) - 1) if parts[i] == stack.container)


def merge(fresh: dict, loaded: dict, scanned: bool, log=print, family: Family | None = None, tile: bool = False,
          fused_outputs: dict | None = None) -> dict:
    """fresh (the model's initialised params) with every leaf `loaded` has at the same path.

    A leaf of a different shape is an error naming it, unless `tile`: then loaded, a smaller
    model of the family, fills fresh by centre tiling (jaxbert.train.tiling; fused_outputs as
    the family's). Returns host (NumPy) params in fresh's layout (scanned or not). ``family``:
    the model's (by default, the family whose encoder ``fresh`` holds).
    """
    family = family or family_of_params(fresh)
    stacks = (family.layer_stack,)
    fresh_flat = flatten(unscan_params(fresh, stacks) if scanned else fresh, sep="/")
    loaded_flat = flatten(loaded, sep="/")
    if f"{family.prefix}/{family.embedding_path}" not in loaded_flat and family.embedding_path in loaded_flat:
        # A bare encoder's checkpoint (BertModel) has no encoder prefix.
        loaded_flat = {f"{family.prefix}/{k}": v for k, v in loaded_flat.items()}
    notes = []
    if tile:
        loaded_flat = tile_params(fresh_flat, loaded_flat, family.fused_outputs if fused_outputs is None else fused_outputs,
                                  vocab_key=f"{family.prefix}/{family.embedding_path}", notes=notes)
    out, kept_fresh = {}, []
    for key, value in fresh_flat.items():
        if key in loaded_flat:
            src = np.asarray(loaded_flat[key])
            if src.shape != tuple(value.shape):
                raise InputError(f"init_from: param {key} has shape {src.shape}, the model wants "
                                 f"{tuple(value.shape)} (check model.preset / model.config / vocab)")
            out[key] = src.astype(np.asarray(value).dtype)
        else:
            out[key] = np.asarray(value)
            kept_fresh.append(key)
    ignored = sorted(set(loaded_flat) - set(fresh_flat))
    log(f"init_from: loaded {len(fresh_flat) - len(kept_fresh)} params"
        + (f"; freshly initialised {len(kept_fresh)}: {', '.join(kept_fresh[:6])}"
           + (" ..." if len(kept_fresh) > 6 else "") if kept_fresh else "")
        + (f"; ignored {len(ignored)} the model lacks: {', '.join(ignored[:4])}" if ignored else ""))
    for note in notes:
        log(note)
    tree = unflatten(out, sep="/")
    return scan_params(tree, stacks) if scanned else tree
