"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run.

DST gets config.json + model.safetensors (transformers' from_pretrained loads
it) and the run's tokenizer files beside them, so that
``AutoTokenizer.from_pretrained(DST)`` works too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_dir_of(recipe, workdir: str | Path) -> Path | None:
    """Where a run's tokenizer lives (None for synthetic data)."""
    from jaxbert.train.sources import tokenizer_dir
    path = tokenizer_dir(recipe, workdir)
    return None if path is None else Path(path)


def export_params(dst: str | Path, cfg, model_class: str, params, tokenizer_dir: str | Path | None) -> Path:
    """Writes params as a Hugging Face directory, built beside DST and renamed into place."""
    import jaxbert
    from jaxbert.model.heads import MODEL_CLASSES
    dst = Path(dst)
    tmp = dst.parent / f".{dst.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    jaxbert.save_pretrained(tmp, MODEL_CLASSES[model_class](cfg), params, format="hf")
    if tokenizer_dir is not None:
        for name in TOKENIZER_FILES:
            if (Path(tokenizer_dir) / name).exists():
                shutil.copy2(Path(tokenizer_dir) / name, tmp / name)
        _fit_tokenizer_to_model(tmp / "tokenizer_config.json", cfg.max_position_embeddings)
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)
    return dst


def _fit_tokenizer_to_model(config_path: Path, max_positions: int) -> None:
    """The tokenizer truncates where the model's position table ends (transformers reads model_max_length)."""
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    config["model_max_length"] = max_positions
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_instructions(path: str | Path) -> str:
    """The lines that load an export in transformers (PyTorch), and what they need installed."""
    return (f"load it in transformers (needs PyTorch: pip install 'jaxbert[torch]'):\n"
            f"  from transformers import AutoTokenizer, BertForMaskedLM\n"
            f"  tok, model = AutoTokenizer.from_pretrained({str(path)!r}), "
            f"BertForMaskedLM.from_pretrained({str(path)!r})")


def export_workdir(workdir: str | Path, dst: str | Path, step: int | None = None) -> Path:
    """The newest (or given) checkpoint of WORKDIR -> a Hugging Face directory at DST."""
    from jaxbert.train.checkpoint import restore_params
    from jaxbert.train.recipe import from_dict
    params, meta = restore_params(workdir, step)
    recipe = from_dict(meta["recipe"])
    if recipe.data.dir is None and not Path(workdir, "tokenizer").exists() and recipe.data.source != "synthetic":
        raise FileNotFoundError(f"{workdir} has no tokenizer/ directory")
    vocab = _word_embeddings(params).shape[0]
    cfg = recipe.bert_config(vocab)
    return export_params(dst, cfg, recipe.model.model_class, params, tokenizer_dir_of(recipe, workdir))


def _word_embeddings(params):
    return params["bert"]["embeddings"]["word_embeddings"]["embedding"]
