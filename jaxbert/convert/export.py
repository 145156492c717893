"""`jaxbert export WORKDIR DST`: a Hugging Face directory from a training run.

DST gets config.json + model.safetensors (transformers' from_pretrained loads
it) and the run's tokenizer files beside them, so that
``AutoTokenizer.from_pretrained(DST)`` works too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.convert.pretrained import MODEL_KIND
from jaxbert.convert.writers import write_hf
from jaxbert.errors import InputError, install_hint
from jaxbert.fs import check_destination, publish_dir
from jaxbert.model.configs import read_config
from jaxbert.model.families import family_of
from jaxbert.workdir import read_run

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "spm.model")


def export_params(dst: str | Path, cfg, model_class: str, params, tokenizer_dir: str | Path | None,
                  overwrite: bool = False, sources: tuple = ()) -> Path:
    """Writes params as a Hugging Face directory, built beside DST and swapped in when complete.

    An existing DST is replaced only when it is an earlier jaxbert model directory
    and ``overwrite`` is set; anything else there is refused by name.
    """
    with publish_dir(dst, MODEL_KIND, overwrite, sources=sources) as tmp:
        write_hf(tmp, cfg, model_class, params)
        if tokenizer_dir is not None:
            tok = fs.local_copy(tokenizer_dir)  # a URL: a local copy
            for name in TOKENIZER_FILES:
                if (tok / name).exists():
                    shutil.copy2(tok / name, Path(tmp) / name)
            _fit_tokenizer_to_model(Path(tmp) / "tokenizer_config.json", cfg)
    return dst if fs.is_url(dst) else Path(dst)


def export_workdir(workdir: str | Path, dst: str | Path, step: int | None = None,
                   overwrite: bool = False) -> Path:
    """The newest (or given) checkpoint of WORKDIR -> a Hugging Face directory at DST.

    DST may not be the workdir or hold it (its checkpoints would go); a folder
    inside the workdir is fine.
    """
    if not fs.as_path(workdir).exists():
        raise InputError(f"{workdir}: does not exist")
    checkpoints = workdir_lib.path(workdir, workdir_lib.CHECKPOINTS)
    check_destination(dst, MODEL_KIND, overwrite, sources=(checkpoints,))  # before the restore
    config, name, params, tok_dir = read_run(workdir, step)
    if tok_dir is not None and not fs.as_path(tok_dir).exists():
        raise InputError(f"{tok_dir}: the run's tokenizer directory does not exist")
    return export_params(dst, config, name, params, tok_dir, overwrite,
                         sources=(checkpoints,) + ((tok_dir,) if tok_dir is not None else ()))


def _fit_tokenizer_to_model(config_path: Path, cfg) -> None:
    """The tokenizer truncates where the model's position table ends (transformers reads model_max_length),
    and gives no token_type_ids to a model whose family reads none (ModernBERT: input_ids, attention_mask)."""
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    config["model_max_length"] = cfg.max_position_embeddings
    if not family_of(cfg).token_types:
        config["model_input_names"] = ["input_ids", "attention_mask"]
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_instructions(path: str | Path) -> str:
    """The lines that load an export in transformers (PyTorch), and what they need installed: its
    family's masked LM (BertForMaskedLM, ModernBertForMaskedLM), which reads any pretraining class."""
    config = read_config(path)
    mlm = family_of(config).mlm_class(config.model_type)
    return (f"load it in transformers (needs PyTorch: {install_hint('torch')} in a clone of jaxbert):\n"
            f"  from transformers import AutoTokenizer, {mlm}\n"
            f"  tok, model = AutoTokenizer.from_pretrained({str(path)!r}), "
            f"{mlm}.from_pretrained({str(path)!r})")
