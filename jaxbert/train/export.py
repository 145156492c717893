"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run.

DST gets config.json + model.safetensors (transformers' from_pretrained loads
it) and the run's tokenizer files beside them, so that
``AutoTokenizer.from_pretrained(DST)`` works too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_dir_of(recipe, workdir: str | Path) -> Path | None:
    """Where a run's tokenizer lives (None for synthetic data)."""
    from jaxbert.train.sources import tokenizer_dir
    path = tokenizer_dir(recipe, workdir)
    return None if path is None else Path(path)


def export_params(dst: str | Path, cfg, model_class: str, params, tokenizer_dir: str | Path | None,
                  overwrite: bool = False, sources: tuple = ()) -> Path:
    """Writes params as a Hugging Face directory, built beside DST and swapped in when complete.

    An existing DST is replaced only when it is an earlier jaxbert model directory
    and ``overwrite`` is set; anything else there is refused by name.
    """
    from jaxbert.convert.api import MODEL_KIND, _write
    from jaxbert.fs import publish_dir
    with publish_dir(dst, MODEL_KIND, overwrite, sources=sources) as tmp:
        _write(tmp, "hf", cfg, model_class, params, "5GB")
        if tokenizer_dir is not None:
            for name in TOKENIZER_FILES:
                if (Path(tokenizer_dir) / name).exists():
                    shutil.copy2(Path(tokenizer_dir) / name, Path(tmp) / name)
    return Path(dst)


def export_workdir(workdir: str | Path, dst: str | Path, step: int | None = None,
                   overwrite: bool = False) -> Path:
    """The newest (or given) checkpoint of WORKDIR -> a Hugging Face directory at DST.

    DST may not be the workdir or hold it (its checkpoints would go); a folder
    inside the workdir is fine.
    """
    from jaxbert.errors import InputError
    from jaxbert.fs import check_destination
    from jaxbert.train.checkpoint import restore_params
    from jaxbert.train.recipe import from_dict
    checkpoints = Path(workdir) / "checkpoints"
    from jaxbert.convert.api import MODEL_KIND
    check_destination(dst, MODEL_KIND, overwrite, sources=(checkpoints,))  # before the restore
    params, meta = restore_params(workdir, step)
    recipe = from_dict(meta["recipe"])
    if recipe.data.dir is None and not Path(workdir, "tokenizer").exists() and recipe.data.source != "synthetic":
        raise InputError(f"{workdir} has no tokenizer/ directory")
    vocab = _word_embeddings(params).shape[0]
    cfg = recipe.bert_config(vocab)
    tok_dir = tokenizer_dir_of(recipe, workdir)
    return export_params(dst, cfg, recipe.model.model_class, params, tok_dir, overwrite,
                         sources=(checkpoints, tok_dir))


def _word_embeddings(params):
    return params["bert"]["embeddings"]["word_embeddings"]["embedding"]
