"""Continued replaced-token-detection pretraining: `model.init_from` under train.objective: rtd.

The generator and the discriminator start from existing weights instead of their fresh initialisation.
``model.init_from`` names one of:

- an RTD workdir (its newest checkpoint): both models as that run left them;
- an RTD export (what `jaxbert export WORKDIR DST` and `outputs.export` write: the discriminator at DIR, the
  generator at DIR/generator; DeBERTa-v3's head in DIR/rtd_head.safetensors), or any directory or file
  `jaxbert.from_pretrained` reads as the discriminator (a released ELECTRA discriminator, a DeBERTa-v3
  DebertaV2Model): the generator from DIR/generator where there is one, else freshly initialised.

Params the source lacks keep their fresh initialisation and the log names them (jaxbert.train.warmstart.merge,
as MLM's continued pretraining); a param of another shape is refused by name. The two whole models are then
put back into the joint tree the run trains (``joint_from_models``, the inverse of rtd_tables.export_params):
``tied`` keeps the discriminator's tables (the generator reads them); ``gdes`` keeps E_G, the generator's
tables, or the discriminator's where the generator starts fresh, and E_delta = E_D - E_G, so that E_G +
E_delta is the discriminator's loaded table (exactly where E_G = E_D, else within float32 rounding); ``none``
keeps each model's own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flax import traverse_util

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.model.families import family_of
from jaxbert.model.params import unscan_params
from jaxbert.model.rtd_tables import export_params, shared_tables
from jaxbert.train import warmstart
from jaxbert.train.rtd_export import GENERATOR, HEAD_FILE, read_discriminator, rtd_recipe_of
from jaxbert.train.rtd_recipe import DISCRIMINATORS, generator_config


def joint_from_models(gen: dict, disc: dict, sharing: str) -> dict:
    """The joint tree {"generator", "discriminator"} whose export (rtd_tables.export_params) is the two whole
    models `gen` and `disc` (host arrays): tied drops the generator's tables, gdes stores the discriminator's
    tables as E_D - E_G."""
    if sharing == "none":
        return {"generator": gen, "discriminator": disc}
    flat_g, flat_d = traverse_util.flatten_dict(gen), traverse_util.flatten_dict(disc)
    g_tables = shared_tables(gen)
    for suffix, d in shared_tables(disc).items():
        if suffix not in g_tables:
            continue
        if sharing == "tied":
            del flat_g[g_tables[suffix]]
        else:
            flat_d[d] = np.asarray(flat_d[d]) - np.asarray(flat_g[g_tables[suffix]])
    return {"generator": traverse_util.unflatten_dict(flat_g), "discriminator": traverse_util.unflatten_dict(flat_d)}


def _with_tables_of(gen: dict, disc: dict) -> dict:
    """gen with the discriminator's shared tables in place of its own (a fresh generator under gdes: E_G = E_D)."""
    flat_g, flat_d = traverse_util.flatten_dict(gen), traverse_util.flatten_dict(disc)
    d_tables = shared_tables(disc)
    for suffix, g in shared_tables(gen).items():
        if suffix in d_tables:
            flat_g[g] = np.asarray(flat_d[d_tables[suffix]])
    return traverse_util.unflatten_dict(flat_g)


def _loaded(path: str, cfg, log) -> tuple[dict | None, dict]:
    """(generator params or None, discriminator params) of `path`, whole models in the per-layer layout."""
    stack = family_of(cfg).layer_stack
    disc_class, gen_class = DISCRIMINATORS[family_of(cfg).name]
    source = rtd_recipe_of(path) if workdir_lib.is_workdir(path) else None
    if source is not None:
        line = warmstart.describe_source(path)
        if line:
            log(line)
        params, _ = workdir_lib.read_params(path, log=log)
        gen, disc = export_params(params, source.rtd.sharing)
        return unscan_params(gen, (stack,)), unscan_params(disc, (stack,))
    local = fs.as_path(path)
    if (local / HEAD_FILE).is_file():  # an RTD export of a family whose discriminator transformers lacks
        disc = unscan_params(read_discriminator(Path(fs.local_copy(path)))[2], (stack,))
    else:
        disc = warmstart.load_source_params(path, disc_class, log)
    gen_dir = local / GENERATOR
    gen = warmstart.load_source_params(str(gen_dir), gen_class, log) if gen_dir.is_dir() else None
    return gen, disc


def warm_start(recipe, cfg, fresh: dict, log=print) -> dict:
    """The joint params (host arrays, in `fresh`'s layout) warm-started from recipe.model.init_from; `fresh` is
    the run's freshly initialised joint tree."""
    sharing, scanned = recipe.rtd.sharing, recipe.model.scan_layers
    family = family_of(cfg)
    fresh_gen, fresh_disc = export_params(fresh, sharing)
    gen_l, disc_l = _loaded(recipe.model.init_from, cfg, log)
    log("init_from (discriminator):")
    disc = warmstart.merge(fresh_disc, disc_l, scanned, log, family=family)
    if gen_l is None:
        log(f"init_from: {recipe.model.init_from} holds no generator ({GENERATOR}/ beside the discriminator, or "
            f"an RTD workdir); the generator ({generator_config(recipe.rtd, cfg).hidden_size} wide) starts fresh"
            + (", reading the discriminator's embeddings" if sharing != "none" else ""))
        gen = _with_tables_of(fresh_gen, disc) if sharing == "gdes" else fresh_gen
    else:
        log("init_from (generator):")
        gen = warmstart.merge(fresh_gen, gen_l, scanned, log, family=family)
    return joint_from_models(_host(gen), _host(disc), sharing)


def _host(tree: dict) -> dict:
    """Every leaf as a NumPy array (merge returns host arrays; a fresh model's leaves may be jax arrays)."""
    return traverse_util.unflatten_dict({k: np.asarray(v) for k, v in traverse_util.flatten_dict(tree).items()})
