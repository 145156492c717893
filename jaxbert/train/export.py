"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run.

DST gets config.json + model.safetensors (transformers' from_pretrained loads
it) and the run's tokenizer files beside them, so that
``AutoTokenizer.from_pretrained(DST)`` works too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jaxbert.convert import read_workdir, save_pretrained, tokenizer_path
from jaxbert.errors import InputError
from jaxbert.model.heads import MODEL_CLASSES

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def export_params(dst: str | Path, cfg, model_class: str, params, tokenizer_dir: str | Path | None) -> Path:
    """Writes params as a Hugging Face directory, built beside DST and renamed into place."""
    dst = Path(dst)
    tmp = dst.parent / f".{dst.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(tmp, MODEL_CLASSES[model_class](cfg), params, format="hf")
    if tokenizer_dir is not None:
        for name in TOKENIZER_FILES:
            if (Path(tokenizer_dir) / name).exists():
                shutil.copy2(Path(tokenizer_dir) / name, tmp / name)
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)
    return dst


def export_workdir(workdir: str | Path, dst: str | Path, step: int | None = None) -> Path:
    """The newest (or given) checkpoint of WORKDIR -> a Hugging Face directory at DST."""
    config, name, params, _ = read_workdir(workdir, step)
    tok_dir = tokenizer_path(workdir)
    if tok_dir is not None and not tok_dir.exists():
        raise InputError(f"{tok_dir}: the run's tokenizer directory does not exist")
    return export_params(dst, config, name, params, tok_dir)
