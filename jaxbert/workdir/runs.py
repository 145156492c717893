"""Reading a finished or running workdir's run: its config, model class, params and tokenizer
(``read_run``; from_pretrained, export, fill-mask, parity and fine-tuning read through it), and what its
newest checkpoint records (config, loader position, a fine-tuning task record).

Nothing is re-derived by a reader: a checkpoint records the run's config and model class beside its recipe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.configs import ConfigError, build_config, read_config_dict
from jaxbert.model.families import family_of_params
from jaxbert.model.rtd_tables import SHARINGS, export_params
from jaxbert.workdir.checkpoints import newest_meta, read_params
from jaxbert.workdir.layout import TOKENIZER, WorkdirError, is_workdir
from jaxbert.workdir.meta import task_record


def run_config(meta: Mapping, vocab_size: int, where) -> tuple[BertConfig, str]:
    """(BertConfig, model class) a checkpoint was trained with: as it recorded them; a checkpoint from
    before they were recorded names them in its recipe's model section (preset, config, model_class)."""
    if isinstance(meta.get("config"), dict) and meta.get("model_class"):
        return read_config_dict(meta["config"]), meta["model_class"]
    model = (meta.get("recipe") or {}).get("model")
    if not isinstance(model, dict) or "preset" not in model or "model_class" not in model:
        raise WorkdirError(f"{where}: its checkpoint records neither the model config nor the recipe's "
                           "model.preset and model.model_class")
    try:
        config = build_config(model["preset"], model.get("config") or {}, vocab_size, model["model_class"])
    except ConfigError as e:
        raise WorkdirError(f"{where}: its recipe's model section does not build a config ({e})") from None
    return config, model["model_class"]


def run_tokenizer_dir(data: Mapping, workdir) -> Path | None:
    """Where a run's tokenizer lives, from its recipe's ``data`` section: data.tokenizer;
    else the directory the data was prepared with (its metadata says) or, failing
    that, the data dir's tokenizer.json (a mixture's first source's); WORKDIR/tokenizer for data built in the
    workdir; None for synthetic data."""
    if data.get("source") == "synthetic":
        return None
    if data.get("tokenizer"):
        return fs.as_path(data["tokenizer"])
    folder = data.get("dir")
    if folder is None and data.get("sources"):  # a mixture: its sources share one tokenizer
        folder = (data["sources"][0] or {}).get("dir")
    if folder is None:
        return fs.as_path(workdir) / TOKENIZER
    meta_path = fs.as_path(folder) / "metadata.json"
    origin = json.loads(meta_path.read_text()).get("tokenizer") if meta_path.exists() else None
    try:
        found = bool(origin) and (fs.as_path(origin) / "tokenizer.json").exists()
    except InputError:  # prepared elsewhere, with a tokenizer this host cannot reach
        found = False
    return fs.as_path(origin if found else folder)


def read_run(workdir, step: int | None = None, log=print) -> tuple[BertConfig, str, dict, Path | None]:
    """(config, model class name, params, tokenizer dir or None) of a workdir's checkpoint; of a
    replaced-token-detection run's, its discriminator (said in the log), as `jaxbert export` writes it."""
    params, meta = read_params(workdir, step, log=log)
    params = _discriminator(params, meta, workdir, log)
    try:
        vocab = family_of_params(params).word_embeddings(params).shape[0]
    except (KeyError, TypeError, AttributeError) as e:
        raise WorkdirError(f"{workdir}: its checkpoint has no word embeddings "
                           f"({e.args[0] if e.args else type(e).__name__})") from None
    config, model_class = run_config(meta, vocab, workdir)
    return config, model_class, params, run_tokenizer_dir((meta.get("recipe") or {}).get("data") or {}, workdir)


def _discriminator(params: dict, meta: Mapping, workdir, log) -> dict:
    """An RTD run's joint {generator, discriminator} tree -> the discriminator as a whole model (its GDES
    tables E_G + E_delta: export_params, as the export takes them); any other run's params as they are."""
    recipe = meta.get("recipe") or {}
    if (recipe.get("train") or {}).get("objective") != "rtd" or set(params) != {"generator", "discriminator"}:
        return params
    sharing = (recipe.get("rtd") or {}).get("sharing")
    if sharing not in SHARINGS:
        raise WorkdirError(f"{workdir}: its checkpoint's recipe has rtd.sharing {sharing!r}, not one of "
                           f"{', '.join(SHARINGS)}")
    log(f"{workdir}: a replaced-token-detection run; reading its discriminator ({meta.get('model_class')}, "
        f"rtd.sharing {sharing}), as `jaxbert export` writes it (the generator is not read)")
    return export_params(params, sharing)[1]


def tokenizer_path(path) -> Path | None:
    """The tokenizer that belongs to a checkpoint: a workdir's run tokenizer, else the
    directory holding the checkpoint when it has tokenizer.json, vocab.txt or spm.model; None if none."""
    if is_workdir(path):
        path = fs.as_path(path)
        _, meta = newest_meta(path)
        return run_tokenizer_dir((meta.get("recipe") or {}).get("data") or {}, path)
    path = fs.local_copy(path)  # a URL: a local copy of it
    folder = path if path.is_dir() else path.parent
    return folder if any((folder / n).is_file() for n in ("tokenizer.json", "vocab.txt", "spm.model")) else None


def recorded_config(workdir) -> dict:
    """The model config (a config.json dict) the workdir's newest readable checkpoint records, {} if none."""
    return dict(newest_meta(fs.as_path(workdir))[1].get("config") or {})


def recorded_loader(workdir) -> dict | None:
    """The loader state (the first process's) of the workdir's newest readable checkpoint; None if none."""
    try:
        loader = newest_meta(fs.as_path(workdir))[1].get("loader") or [None]
    except WorkdirError:
        return None
    return loader[0]


def newest_task_record(workdir) -> dict:
    """The task record of the workdir's newest readable checkpoint ({} when it has none)."""
    try:
        return task_record(newest_meta(fs.as_path(workdir))[1])
    except WorkdirError:
        return {}
