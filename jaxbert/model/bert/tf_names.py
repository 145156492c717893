"""BERT's original TensorFlow checkpoints named as transformers' classes (as load_tf_weights_in_bert maps them):
``layer_3`` -> ``layer.3``, ``kernel`` (transposed) / ``gamma`` / ``output_weights`` -> ``weight``, ``beta`` /
``output_bias`` -> ``bias``, ``squad`` -> ``classifier``; optimizer slots and the step counter are skipped with their
reason. The default of every family without a map of its own (``Family.tf_names``); ELECTRA's builds on it."""

from __future__ import annotations

import re

# Variables that are not weights: optimizer slots and the step counter (as transformers skips them).
SKIPPED_PARTS = {"adam_m": "optimizer slot (Adam first moment)", "adam_v": "optimizer slot (Adam second moment)",
                 "AdamWeightDecayOptimizer": "optimizer state", "AdamWeightDecayOptimizer_1": "optimizer state",
                 "global_step": "training step counter"}


def tf_name_to_key(name: str) -> tuple[str | None, bool, str]:
    """A TF variable name -> (state-dict key or None, transpose?, why skipped)."""
    parts = name.split("/")
    for part in parts:
        if part in SKIPPED_PARTS:
            return None, False, SKIPPED_PARTS[part]
    out = []
    for part in parts:
        m = re.fullmatch(r"([A-Za-z]+)_(\d+)", part)
        if m:  # layer_3 -> layer.3
            out += [m.group(1), m.group(2)]
        elif part in ("kernel", "gamma", "output_weights"):
            out.append("weight")
        elif part in ("beta", "output_bias"):
            out.append("bias")
        elif part == "squad":
            out.append("classifier")
        else:
            out.append(part)
    if parts[-1].endswith("_embeddings"):
        out.append("weight")
    return ".".join(out), parts[-1] == "kernel", ""
