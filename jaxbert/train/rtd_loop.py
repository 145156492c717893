"""Replaced-token detection on the pretraining loop (train.objective: rtd): the objective, the two models, the outputs.

jaxbert.train.loop reads these where an RTD recipe differs from an MLM one: ``build_pair`` is the model the runner
trains (jaxbert.train.rtd.RtdModel: the generator and the discriminator over one joint param tree, one optimizer),
``objective`` the step spec and figures its task runs (the loop's RtdTask: MlmTask's batches, resume, evaluation
and logging with these), ``flops_per_token`` both models' training FLOPs, ``finish`` what a finished run leaves
(curves, the export of both models, fill-mask with the generator). Batches, packing, mixtures, accumulation,
FSDP, batch-size warmup and resume are MLM's, unchanged: the objective reads the same MLM-masked batches.
"""

from __future__ import annotations

import dataclasses
import functools

from jaxbert import workdir as workdir_lib
from jaxbert.model.flops import train_flops_per_token
from jaxbert.train import outputs
from jaxbert.train.rtd import rtd_spec, summarize
from jaxbert.train.rtd_export import build_pair, export_pair, models_for_export
from jaxbert.train.rtd_recipe import generator_config

__all__ = ["build_pair", "objective", "flops_per_token", "finish"]


def objective(recipe):
    """(the RTD StepSpec at rtd.weight, its summarize) for the loop's task."""
    weight = recipe.rtd.weight
    return rtd_spec(weight), functools.partial(summarize, weight=weight)


def flops_per_token(recipe, cfg) -> float:
    """Training FLOPs per token of both models: the generator with its vocabulary head at the masked slots, the
    discriminator with no vocabulary head and its per-token head (dense H x H, then H x 1) at every token."""
    T = recipe.data.seq_len
    gen = train_flops_per_token(generator_config(recipe.rtd, cfg), T, recipe.data.masked_slots() / T)
    H = cfg.hidden_size
    return gen + train_flops_per_token(cfg, T, 0.0) + 6 * (H * H + H)


def finish(recipe, workdir, cfg, params, tokenizer_dir, log=print) -> dict:
    """A finished RTD run's outputs: curves.png and fill-mask as an MLM run's (the generator's), the export of both
    models (the discriminator at WORKDIR/hf, the generator at WORKDIR/hf/generator)."""
    (gen_model, gen), (_, disc) = models_for_export(recipe, cfg, params)
    plain = dataclasses.replace(recipe, outputs=dataclasses.replace(recipe.outputs, export=False))
    out = outputs.finish(plain, workdir, gen_model, gen, tokenizer_dir, log)
    if recipe.outputs.export:
        dst = workdir_lib.path(workdir, workdir_lib.EXPORT)
        out["export"] = str(export_pair(dst, recipe, cfg, gen, disc, tokenizer_dir, overwrite=True))
        log(f"Hugging Face export: {out['export']} (discriminator), {out['export']}/generator (generator)")
    return out
