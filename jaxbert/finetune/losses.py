"""Per-kind losses as weighted sums with their denominator.

Every function takes the model's output for a batch of B rows and the batch itself, and
returns sums: loss_sum (the weighted loss), weight (the denominator: rows, or labelled tokens
for tagging) and, for the classifying kinds, correct. Padding rows of the last batch carry
valid = 0 and weigh nothing. Losses are taken in float32 whatever the compute dtype.

  classification, choice: cross-entropy of logits [B, K] / [B, C] against labels [B]
  regression:             squared error of logits [B, 1] against labels [B] (float32)
  tokens:                 cross-entropy of logits [B, L, K] against labels [B, L], IGNORE (-100) skipped
  qa:                     (cross-entropy of start_logits [B, L] + of end_logits [B, L]) / 2
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxbert.finetune.features import IGNORE
from jaxbert.engine.step import cross_entropy

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def weights(kind: str, batch: dict) -> jnp.ndarray:
    """The loss weight of every target: valid [..., B], or valid x labelled [..., B, L] for tokens."""
    valid = batch["valid"].astype(jnp.float32)
    if kind == "tokens":
        return valid[..., None] * (batch["labels"] != IGNORE).astype(jnp.float32)
    return valid


def task_sums(kind: str, out, batch: dict) -> dict:
    """{loss_sum, weight[, correct]} for one batch [B, ...]."""
    w = weights(kind, batch)
    if kind == "qa":
        start = cross_entropy(out.start_logits.astype(jnp.float32), batch["start_positions"])
        end = cross_entropy(out.end_logits.astype(jnp.float32), batch["end_positions"])
        return {"loss_sum": jnp.sum((start + end) / 2 * w), "weight": jnp.sum(w)}
    logits = out.logits.astype(jnp.float32)
    if kind == "regression":
        err = logits[..., 0] - batch["labels"].astype(jnp.float32)
        return {"loss_sum": jnp.sum(err * err * w), "weight": jnp.sum(w)}
    labels = batch["labels"]
    if kind == "tokens":
        labels = jnp.where(labels == IGNORE, 0, labels)  # ignored positions weigh 0
    nll = cross_entropy(logits, labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss_sum": jnp.sum(nll * w), "correct": jnp.sum(correct * w), "weight": jnp.sum(w)}


def outputs(kind: str, out) -> dict:
    """What evaluation and prediction keep per row: logits, or start / end logits (float32)."""
    if kind == "qa":
        return {"start_logits": out.start_logits.astype(jnp.float32), "end_logits": out.end_logits.astype(jnp.float32)}
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
