"""The two models of a replaced-token-detection run as transformers directories: the discriminator at DST, the
generator at DST/generator (ELECTRA: ElectraForPreTraining, ElectraForMaskedLM), each with the run's tokenizer
beside it, built beside DST and swapped in whole (jaxbert.fs.publish_dir); `jaxbert export WORKDIR DST` of an RTD
workdir (``export_workdir``).

A family whose discriminator transformers has no class for (DeBERTa-v3: jaxbert's DebertaV2ForReplacedTokenDetection)
is written at DST as its backbone (DebertaV2Model, as the released v3 checkpoints are), and the discriminator's own
head beside it in DST/rtd_head.safetensors (its state-dict keys, ``mask_predictions.*``), which transformers does
not read; ``read_discriminator(DST)`` reads the two back as the discriminator."""

from __future__ import annotations

import shutil
from pathlib import Path

from flax import traverse_util

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.convert.export import TOKENIZER_FILES, _fit_tokenizer_to_model
from jaxbert.convert.load import state_dict_to_params
from jaxbert.convert.pretrained import MODEL_KIND, load_checkpoint
from jaxbert.convert.safetensors_io import SafetensorsReader, iter_safetensors, write_safetensors
from jaxbert.convert.writers import iter_state_dict, write_hf
from jaxbert.errors import InputError
from jaxbert.fs import check_destination, publish_dir
from jaxbert.model.configs import read_config
from jaxbert.model.families import family_of
from jaxbert.train.recipe import from_dict
from jaxbert.train.rtd import RtdModel, export_params, shared_tables
from jaxbert.train.rtd_recipe import DISCRIMINATORS, generator_config

GENERATOR = "generator"  # the generator's folder inside the export
HEAD_FILE = "rtd_head.safetensors"  # the discriminator's head where DST holds only its backbone
# family -> the class its discriminator is exported as, where transformers has no class for the discriminator
BACKBONES = {"deberta-v2": "DebertaV2Model"}


def build_pair(recipe, cfg) -> RtdModel:
    """The generator (the family's masked LM at rtd.generator's size) and the discriminator (model.model_class
    at the recipe's config), with the recipe's compute options, sharing as rtd.sharing says."""
    family = family_of(cfg)
    disc_class, gen_class = DISCRIMINATORS[family.name]
    options = recipe.model.options()
    return RtdModel(family.build(gen_class, generator_config(recipe.rtd, cfg), options),
                    family.build(disc_class, cfg, options), recipe.rtd.sharing)


def models_for_export(recipe, cfg, params) -> tuple:
    """((generator module, its params), (discriminator module, its params)) of a joint param tree, as whole
    models: the shared tables in both, GDES's discriminator tables E_G + E_delta."""
    pair = build_pair(recipe, cfg)
    gen, disc = export_params(params, recipe.rtd.sharing)
    return (pair.generator, gen), (pair.discriminator, disc)


def _copy_tokenizer(tokenizer_dir, dst: Path, cfg) -> None:
    tok = fs.local_copy(tokenizer_dir)
    for name in TOKENIZER_FILES:
        if (tok / name).exists():
            shutil.copy2(tok / name, dst / name)
    _fit_tokenizer_to_model(dst / "tokenizer_config.json", cfg)


def export_pair(dst, recipe, cfg, gen_params, disc_params, tokenizer_dir, overwrite: bool = False,
                sources: tuple = ()):
    """The two models of an RTD run (whole params, jaxbert.train.rtd.export_params) as one export."""
    disc_class, gen_class = DISCRIMINATORS[family_of(cfg).name]
    gen_cfg = generator_config(recipe.rtd, cfg)
    with publish_dir(dst, MODEL_KIND, overwrite, sources=sources) as tmp:
        tmp = Path(tmp)
        _write_discriminator(tmp, cfg, disc_class, disc_params)
        write_hf(tmp / GENERATOR, gen_cfg, gen_class, gen_params)
        if tokenizer_dir is not None:
            _copy_tokenizer(tokenizer_dir, tmp, cfg)
            _copy_tokenizer(tokenizer_dir, tmp / GENERATOR, gen_cfg)
    return dst if fs.is_url(dst) else Path(dst)


def _write_discriminator(tmp: Path, cfg, disc_class: str, params) -> None:
    """The discriminator at tmp: its transformers class, or (BACKBONES) the backbone class and HEAD_FILE."""
    family = family_of(cfg)
    backbone = BACKBONES.get(family.name)
    if backbone is None:
        write_hf(tmp, cfg, disc_class, params)
        return
    write_hf(tmp, cfg, backbone, params[family.prefix])
    head = [(k, v) for k, v in iter_state_dict(params, cfg, disc_class) if not k.startswith(family.prefix + ".")]
    write_safetensors(tmp / HEAD_FILE, [(k, v.shape, v.dtype) for k, v in head], iter(head),
                      metadata={"format": "pt", "model_class": disc_class, "backbone": backbone})


def read_discriminator(path, dtype=None) -> tuple:
    """(config, class name, params) of the discriminator an RTD export holds at ``path`` (a local directory): for
    a family exported as its backbone (DeBERTa-v3), the backbone's weights and HEAD_FILE joined into the
    discriminator class, every tensor required (strict); for ELECTRA, its ElectraForPreTraining directory."""
    path = Path(path)
    if not (path / HEAD_FILE).is_file():
        cfg, name, params, _ = load_checkpoint(path, dtype=dtype, strict=True)
        return cfg, name, params
    with SafetensorsReader(path / HEAD_FILE) as reader:
        disc_class = reader.metadata.get("model_class")
    cfg = read_config(path / "config.json")
    family = family_of(cfg)
    if disc_class != DISCRIMINATORS.get(family.name, ("",))[0]:
        raise InputError(f"{path / HEAD_FILE}: names model_class {disc_class!r}, not the {family.name} discriminator")
    weights = sorted(path.glob("model*.safetensors"))
    if not weights:
        raise InputError(f"{path}: no model.safetensors beside {HEAD_FILE}")
    state = {f"{family.prefix}.{k}": v for f in weights for k, v in iter_safetensors(f)}
    state.update(iter_safetensors(path / HEAD_FILE))
    cfg = cfg.replace(architectures=(disc_class,))
    params, _ = state_dict_to_params(state, cfg, disc_class, dtype=dtype, strict=True, source=str(path))
    return cfg, disc_class, params


def rtd_recipe_of(workdir):
    """The Recipe an RTD workdir was run with (its newest checkpoint's record), or None for any other workdir."""
    try:
        _, meta = workdir_lib.newest_meta(fs.as_path(workdir))
    except Exception:  # noqa: BLE001 - not a readable pretraining workdir: the plain export says why
        return None
    saved = workdir_lib.saved_recipe(meta)
    if (saved.get("train") or {}).get("objective") != "rtd":
        return None
    return from_dict(saved)


def export_workdir(workdir, dst, step: int | None = None, overwrite: bool = False):
    """An RTD workdir's newest (or given) checkpoint -> DST (discriminator) and DST/generator."""
    recipe = rtd_recipe_of(workdir)
    if recipe is None:
        raise InputError(f"{workdir}: not a replaced-token-detection workdir (train.objective: rtd)")
    checkpoints = workdir_lib.path(workdir, workdir_lib.CHECKPOINTS)
    check_destination(dst, MODEL_KIND, overwrite, sources=(checkpoints,))
    params, meta = workdir_lib.read_params(workdir, step)
    flat = traverse_util.flatten_dict(params["discriminator"])
    words = [flat[path] for suffix, path in shared_tables(params["discriminator"]).items()
             if suffix[1] == "word_embeddings"]
    if not words:
        raise InputError(f"{workdir}: its checkpoint holds no discriminator word embeddings")
    cfg, _ = workdir_lib.run_config(meta, words[0].shape[0], workdir)
    tok_dir = workdir_lib.run_tokenizer_dir((meta.get("recipe") or {}).get("data") or {}, workdir)
    if tok_dir is not None and not fs.as_path(tok_dir).exists():
        raise InputError(f"{tok_dir}: the run's tokenizer directory does not exist")
    (_, gen), (_, disc) = models_for_export(recipe, cfg, params)
    return export_pair(dst, recipe, cfg, gen, disc, tok_dir, overwrite,
                       sources=(checkpoints,) + ((tok_dir,) if tok_dir is not None else ()))
