"""A training workdir as a checkpoint source: config, params and tokenizer of its newest checkpoint.

A workdir holds ``checkpoints/<step>/state`` (Orbax: params, optimizer state,
step) and ``checkpoints/<step>/meta/metadata`` (JSON with the recipe). This
module reads them as plain data: the recipe's ``model`` section (preset, config
overrides, class) and the vocabulary size of the saved embeddings give the
config; the ``data`` section says where the tokenizer is. It knows nothing of
the trainer itself, which sits above conversion.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Mapping

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.model.config import BertConfig
from jaxbert.convert.result import ConversionError

CHECKPOINTS = "checkpoints"


def is_workdir(path) -> bool:
    return (fs.as_path(path) / CHECKPOINTS).is_dir()


def _steps(root) -> list[int]:
    """Checkpoint steps under root, newest first. On a bucket (no rename) Orbax marks a finished
    step with commit_success.txt; a step without it is still being written."""
    steps = sorted((int(p.name) for p in root.glob("*") if p.name.isdigit()), reverse=True)
    if fs.is_url(root):
        steps = [s for s in steps if (root / str(s) / "commit_success.txt").exists()]
    return steps


def read_params(workdir, step: int | None = None, log=print) -> tuple[dict, dict]:
    """(params as NumPy arrays, meta) from a workdir's newest readable (or given) checkpoint.

    Reads only the params, on the host, without knowing their layout in advance:
    enough for export, fill-mask and continued pretraining on any machine.
    """
    root = fs.as_path(workdir) / CHECKPOINTS
    steps = [step] if step is not None else _steps(root)
    if not steps:
        raise ConversionError(f"{root}: no checkpoint in it")
    last_error = None
    for s in steps:
        try:
            meta = json.loads((root / str(s) / "meta" / "metadata").read_text())
            reader = ocp.PyTreeCheckpointer()
            with _quiet_absl():  # the item has no step-level metadata file; absl says so at WARNING
                tree = reader.metadata(root / str(s) / "state").item_metadata.tree
            as_numpy = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree["params"])
            restored = reader.restore(root / str(s) / "state", args=ocp.args.PyTreeRestore(
                item={"params": tree["params"]}, restore_args={"params": as_numpy}, partial_restore=True))
            return restored["params"], meta
        except Exception as e:  # noqa: BLE001 - try the one before
            last_error = e
            log(f"checkpoint {root / str(s)} is unreadable ({type(e).__name__}); trying the one before")
    raise ConversionError(f"{root}: no readable checkpoint ({type(last_error).__name__}: {last_error})")


@contextlib.contextmanager
def _quiet_absl():
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def workdir_config(model: Mapping, vocab_size: int) -> BertConfig:
    """The run's BertConfig from its recipe's ``model`` section and its vocabulary size."""
    return BertConfig.from_pretrained(model.get("preset", "bert-tiny")).with_overrides(
        model.get("config") or {}, vocab_size, model.get("model_class", "BertForMaskedLM"))


def run_tokenizer_dir(data: Mapping, workdir) -> Path | None:
    """Where a run's tokenizer lives, from its recipe's ``data`` section: data.tokenizer;
    else the directory the data was prepared with (its metadata says) or, failing
    that, the data dir's tokenizer.json; WORKDIR/tokenizer for data built in the
    workdir; None for synthetic data."""
    if data.get("source") == "synthetic":
        return None
    if data.get("tokenizer"):
        return fs.as_path(data["tokenizer"])
    if data.get("dir") is None:
        return fs.as_path(workdir) / "tokenizer"
    meta_path = fs.as_path(data["dir"]) / "metadata.json"
    origin = json.loads(meta_path.read_text()).get("tokenizer") if meta_path.exists() else None
    try:
        found = bool(origin) and (fs.as_path(origin) / "tokenizer.json").exists()
    except InputError:  # prepared elsewhere, with a tokenizer this host cannot reach
        found = False
    return fs.as_path(origin if found else data["dir"])


def read_workdir(workdir, step: int | None = None) -> tuple[BertConfig, str, dict, Path | None]:
    """(config, model class name, params, tokenizer dir or None) of a workdir's checkpoint."""
    params, meta = read_params(workdir, step)
    recipe = meta.get("recipe")
    if not isinstance(recipe, dict):
        raise ConversionError(f"{workdir}: its checkpoint metadata holds no recipe")
    model = recipe.get("model") or {}
    encoder = "roberta" if isinstance(params, dict) and "roberta" in params else "bert"  # the family's prefix
    try:
        vocab = params[encoder]["embeddings"]["word_embeddings"]["embedding"].shape[0]
    except (KeyError, TypeError):
        raise ConversionError(f"{workdir}: its checkpoint has no {encoder}/embeddings/word_embeddings") from None
    config = workdir_config(model, vocab)
    return config, config.architectures[0], params, run_tokenizer_dir(recipe.get("data") or {}, workdir)


def tokenizer_path(path) -> Path | None:
    """The tokenizer that belongs to a checkpoint: a workdir's run tokenizer, else the
    directory holding the checkpoint when it has tokenizer.json or vocab.txt; None if neither."""
    if is_workdir(path):
        path = fs.as_path(path)
        _, meta = _newest_meta(path)
        return run_tokenizer_dir((meta.get("recipe") or {}).get("data") or {}, path)
    path = fs.local_copy(path)  # a URL: a local copy of it
    folder = path if path.is_dir() else path.parent
    return folder if any((folder / n).is_file() for n in ("tokenizer.json", "vocab.txt")) else None


def _newest_meta(workdir: Path) -> tuple[int, dict]:
    root = workdir / CHECKPOINTS
    for step in _steps(root):
        try:
            return step, json.loads((root / str(step) / "meta" / "metadata").read_text())
        except (OSError, ValueError):
            continue
    raise ConversionError(f"{root}: no checkpoint in it")
