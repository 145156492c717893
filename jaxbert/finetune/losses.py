"""Loss pieces the task kinds build their sums from, and the host side's sums -> figures.

A kind's sums (jaxbert.finetune.kinds) for a batch of B rows are loss_sum (the weighted loss),
weight (the denominator: rows, or labelled tokens for tagging) and, for the classifying kinds,
correct. Padding rows of the last batch carry valid = 0 and weigh nothing. Losses are taken in
float32 whatever the compute dtype.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxbert.engine.step import cross_entropy

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def valid_weights(batch: dict) -> jnp.ndarray:
    """valid [..., B] as float32: one per real row, zero per padding row."""
    return batch["valid"].astype(jnp.float32)


def class_sums(logits, labels, w) -> dict:
    """Cross-entropy of logits [..., K] against class ids [...], and the argmax's hits, weighted by w."""
    logits = logits.astype(jnp.float32)
    nll = cross_entropy(logits, labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss_sum": jnp.sum(nll * w), "correct": jnp.sum(correct * w), "weight": jnp.sum(w)}


def logits_output(out) -> dict:
    """Evaluation keeps the logits (float32)."""
    return {"logits": out.logits.astype(jnp.float32)}


def summarize(sums: dict, prefix: str = "") -> dict:
    """Host side: sums -> loss (and accuracy) means, plus the norms and learning rate passed through."""
    w = max(float(sums.get("weight", 0.0)), 1e-9)
    out = {prefix + "loss": float(sums["loss_sum"]) / w}
    if "correct" in sums:
        out[prefix + "accuracy"] = float(sums["correct"]) / w
    for key in ("grad_norm", "update_norm", "param_norm", "learning_rate"):
        if key in sums:
            out[prefix + key] = float(sums[key])
    return out
