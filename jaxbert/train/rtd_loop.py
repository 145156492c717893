"""Replaced-token detection on the pretraining loop (train.objective: rtd): the two models, the task, the outputs.

jaxbert.train.loop calls these where an RTD recipe differs from an MLM one: ``build_pair`` is the model the
runner trains (jaxbert.train.rtd.RtdModel: the generator and the discriminator over one joint param tree,
one optimizer), ``RtdTask`` the engine's task (MlmTask's batches, resume, evaluation and logging with the RTD
objective and its figures), ``finish`` what a finished run leaves (curves, the export of both models,
fill-mask with the generator). Batches, packing, mixtures, accumulation, FSDP, batch-size warmup and resume
are MLM's, unchanged: the objective reads the same MLM-masked batches.
"""

from __future__ import annotations

import functools
import importlib.util

import jax

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.model.families import family_of
from jaxbert.model.flops import train_flops_per_token
from jaxbert.train.loop import MlmTask
from jaxbert.train.rtd import RtdModel, export_params, rtd_spec, summarize
from jaxbert.train.rtd_recipe import DISCRIMINATORS, generator_config


def build_pair(recipe, cfg) -> RtdModel:
    """The generator (the family's masked LM at rtd.generator's size) and the discriminator (model.model_class
    at the recipe's config), with the recipe's compute options, sharing as rtd.sharing says."""
    family = family_of(cfg)
    disc_class, gen_class = DISCRIMINATORS[family.name]
    options = recipe.model.options()
    gen_cfg = generator_config(recipe.rtd, cfg)
    return RtdModel(family.build(gen_class, gen_cfg, options), family.build(disc_class, cfg, options),
                    recipe.rtd.sharing)


def flops_per_token(recipe, cfg) -> float:
    """Training FLOPs per token of both models: the generator with its vocabulary head at the masked slots, the
    discriminator with no vocabulary head and its per-token head (dense H x H, then H x 1) at every token."""
    T = recipe.data.seq_len
    gen = train_flops_per_token(generator_config(recipe.rtd, cfg), T, recipe.data.masked_slots() / T)
    H = cfg.hidden_size
    return gen + train_flops_per_token(cfg, T, 0.0) + 6 * (H * H + H)


class RtdTask(MlmTask):
    """MlmTask with the RTD objective (jaxbert.train.rtd.rtd_spec at rtd.weight) and its figures."""

    def __init__(self, run, source, start: int):
        weight = run.recipe.rtd.weight
        self.step = rtd_spec(weight)  # before MlmTask compiles the eval step from it
        self.summarize = functools.partial(summarize, weight=weight)
        super().__init__(run, source, start)
        tokens, T, _, peak = self._throughput
        self._throughput = (tokens, T, flops_per_token(run.recipe, run.cfg), peak)


def models_for_export(recipe, cfg, params) -> tuple:
    """((generator module, its params), (discriminator module, its params)) of a joint param tree, as whole
    models: the shared tables in both, GDES's discriminator tables E_G + E_delta."""
    pair = build_pair(recipe, cfg)
    gen, disc = export_params(params, recipe.rtd.sharing)
    return (pair.generator, gen), (pair.discriminator, disc)


def finish(recipe, workdir, cfg, params, tokenizer_dir, log=print) -> dict:
    """A finished RTD run's outputs: curves.png, the export (the discriminator at WORKDIR/hf, the generator at
    WORKDIR/hf/generator), fill-mask by the generator."""
    from jaxbert.data.tokenizer import load_tokenizer
    from jaxbert.fs import atomic_write_text
    from jaxbert.train.outputs import _showcase
    from jaxbert.train.plot import plot_workdir
    from jaxbert.train.rtd_export import export_pair

    out, o, workdir = {}, recipe.outputs, fs.as_path(workdir)
    if o.plot and importlib.util.find_spec("matplotlib") is not None:
        out["plot"] = str(plot_workdir(workdir))
        log(f"curves: {out['plot']}")
    (gen_model, gen), (disc_model, disc) = models_for_export(recipe, cfg, params)
    if o.export:
        dst = workdir_lib.path(workdir, workdir_lib.EXPORT)
        out["export"] = str(export_pair(dst, recipe, cfg, gen, disc, tokenizer_dir, overwrite=True))
        log(f"Hugging Face export: {out['export']} (discriminator), {out['export']}/generator (generator)")
    if o.fill_mask and tokenizer_dir is not None:
        tok = load_tokenizer(tokenizer_dir)
        gen = jax.device_get(gen)
        lines = [_showcase(gen_model, gen, tok, item) for item in o.fill_mask]
        atomic_write_text(workdir_lib.path(workdir, workdir_lib.FILL_MASK), "\n".join(lines) + "\n")
        log("fill-mask (the generator):\n" + "\n".join(lines))
    return out
