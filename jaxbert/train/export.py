"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run.

DST gets config.json + model.safetensors (transformers' from_pretrained loads
it) and the run's tokenizer files beside them, so that
``AutoTokenizer.from_pretrained(DST)`` works too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jaxbert import fs

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_dir_of(recipe, workdir: str | Path) -> Path | None:
    """Where a run's tokenizer lives (None for synthetic data)."""
    from jaxbert.train.sources import tokenizer_dir
    path = tokenizer_dir(recipe, workdir)
    return None if path is None else fs.as_path(path)


def export_params(dst: str | Path, cfg, model_class: str, params, tokenizer_dir: str | Path | None) -> Path:
    """Writes params as a Hugging Face directory, built beside DST and renamed into place."""
    import jaxbert
    from jaxbert.model.heads import MODEL_CLASSES
    if fs.is_url(dst):  # built in a local folder, published to the bucket when complete
        with fs.publish_dir(dst, "export", overwrite=True) as local:
            export_params(os.fspath(local) + "/hf", cfg, model_class, params, tokenizer_dir)
            for entry in Path(os.fspath(local), "hf").iterdir():
                entry.rename(Path(os.fspath(local), entry.name))
            Path(os.fspath(local), "hf").rmdir()
        return fs.as_path(dst)
    dst = Path(dst)
    tmp = dst.parent / f".{dst.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    jaxbert.save_pretrained(tmp, MODEL_CLASSES[model_class](cfg), params, format="hf")
    if tokenizer_dir is not None:
        tok = fs.local_copy(tokenizer_dir)
        for name in TOKENIZER_FILES:
            if (tok / name).exists():
                shutil.copy2(tok / name, tmp / name)
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)
    return dst


def export_workdir(workdir: str | Path, dst: str | Path, step: int | None = None) -> Path:
    """The newest (or given) checkpoint of WORKDIR -> a Hugging Face directory at DST."""
    from jaxbert.train.checkpoint import restore_params
    from jaxbert.train.recipe import from_dict
    params, meta = restore_params(workdir, step)
    recipe = from_dict(meta["recipe"])
    if recipe.data.dir is None and not (fs.as_path(workdir) / "tokenizer").exists() and recipe.data.source != "synthetic":
        raise FileNotFoundError(f"{workdir} has no tokenizer/ directory")
    vocab = _word_embeddings(params).shape[0]
    cfg = recipe.bert_config(vocab)
    return export_params(dst, cfg, recipe.model.model_class, params, tokenizer_dir_of(recipe, workdir))


def _word_embeddings(params):
    return params["bert"]["embeddings"]["word_embeddings"]["embedding"]
