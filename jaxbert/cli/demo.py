"""`jaxbert demo`: build a BERT from a preset, run it on a sentence, print what comes out."""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxbert.model.configs import PRESETS, preset
from jaxbert.model.bert.heads import BertForMaskedLM
from jaxbert.model.classes import param_count


def add_arguments(p):
    p.add_argument("--preset", default="bert-tiny", choices=PRESETS)
    p.add_argument("--length", type=int, default=16)


def run(args) -> int:
    cfg = preset(args.preset)
    model = BertForMaskedLM(cfg)
    ids = np.random.default_rng(0).integers(1, cfg.vocab_size, (2, args.length))
    t0 = time.perf_counter()
    params = jax.jit(model.init)(jax.random.key(0), ids)
    out = jax.jit(lambda p, x: model.apply(p, x, output_hidden_states=True))(params, ids)
    out.logits.block_until_ready()
    print(f"{args.preset}: BertForMaskedLM with {param_count(params):,} params on {jax.devices()[0].platform}")
    print(f"input_ids {ids.shape} -> logits {out.logits.shape}, {len(out.hidden_states)} hidden states "
          f"of {out.hidden_states[0].shape} ({time.perf_counter() - t0:.1f} s with compile)")
    return 0
