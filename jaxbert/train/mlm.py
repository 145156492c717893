"""The MLM (and NSP) objective, as the engine's step builder takes it.

``train_step(state, batch, rng) -> (state, metrics)`` does one optimizer update
from a batch of ``accum`` micro-batches (jaxbert.engine.step). The MLM loss is
taken only at the masked positions: the model gathers them before the vocabulary
projection; with a vocabulary of 64k entries or more (ModelOptions.vocab_loss_chunk) it is
taken over vocabulary chunks, no [B, M, V] logits held (jaxbert.model.vocab_loss). Metrics
come back as sums with their denominators, normalised on the host by ``summarize``.

Batch keys (NumPy or jax arrays; the train batch has a leading accum axis):
  input_ids, token_type_ids, attention_mask  int32 [A, B, L]
  masked_positions, masked_labels            int32 [A, B, M]
  masked_weights                              float32 [A, B, M] (0 = padding slot)
  next_sentence_labels                        int32 [A, B] (NSP recipes only)
  segment_ids                                 int32 [A, B, L] (data.packing: documents only;
                                              0 = padding, 1..k = the documents of a row)
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from jaxbert.engine.step import StepSpec, make_eval_step, make_train_step, nll_and_predicted
from jaxbert.model.vocab_loss import VocabProjection, deferred_vocab_logits


def _forward(params, apply_fn, mb, rng, deterministic):
    # Packed documents (data.packing: documents) carry segment ids; other batches call as before.
    packed = {"segment_ids": mb["segment_ids"]} if "segment_ids" in mb else {}
    # A head whose options take the loss in vocabulary chunks returns a VocabProjection in place of its logits.
    with deferred_vocab_logits():
        return apply_fn({"params": params}, mb["input_ids"], mb["token_type_ids"],
                        attention_mask=mb["attention_mask"], masked_positions=mb["masked_positions"],
                        deterministic=deterministic, rngs={"dropout": rng}, **packed)


def _sums(out, mb) -> dict:
    """Weighted loss sums for one micro-batch [B, ...]."""
    # The loss in float32 at least (bf16 logits lose it there), never below the compute dtype.
    loss_dtype = jnp.promote_types(out.logits.dtype, jnp.float32)
    labels, weights = mb["masked_labels"], mb["masked_weights"].astype(loss_dtype)
    if isinstance(out.logits, VocabProjection):  # the loss and argmax over vocabulary chunks, no [B, M, V] logits
        nll, guess = out.logits.nll_and_predicted(labels)
    else:
        nll, guess = nll_and_predicted(out.logits, labels)  # [B, M]
    correct = (guess == labels).astype(jnp.float32)
    m = {"mlm_loss_sum": jnp.sum(nll * weights), "mlm_correct": jnp.sum(correct * weights),
         "mlm_weight": jnp.sum(weights)}
    if "next_sentence_labels" in mb:
        nsp_logits = out.seq_relationship_logits.astype(loss_dtype)  # [B, 2]
        nsp_labels = mb["next_sentence_labels"]
        nsp_loss = optax.softmax_cross_entropy_with_integer_labels(nsp_logits, nsp_labels)
        nsp_correct = (jnp.argmax(nsp_logits, -1) == nsp_labels).astype(jnp.float32)
        if "next_sentence_weights" in mb:  # a batch-size warmup's padding weighs nothing (jaxbert.train.loop)
            w = mb["next_sentence_weights"]
            m["nsp_loss_sum"] = jnp.sum(nsp_loss * w.astype(loss_dtype))
            m["nsp_correct"], m["nsp_count"] = jnp.sum(nsp_correct * w), jnp.sum(w)
        else:
            m["nsp_loss_sum"] = jnp.sum(nsp_loss)
            m["nsp_correct"] = jnp.sum(nsp_correct)
            m["nsp_count"] = jnp.asarray(nsp_labels.shape[0], jnp.float32)
    return m


def _objective(m: dict, dens: dict, batch: dict):
    """Mean MLM loss over every masked token of the global batch (all micro-batches, all devices)
    plus, with NSP data, the mean NSP loss over this device's sequences."""
    loss = m["mlm_loss_sum"] / dens["mlm"]
    if "nsp_loss_sum" in m:
        # Sequences per device shard: every pmap device holds an equal share (the weighted ones, when a
        # batch-size warmup pads the step)
        rows = (jnp.maximum(jnp.sum(batch["next_sentence_weights"]), 1.0) if "next_sentence_weights" in batch
                else float(batch["input_ids"].shape[0] * batch["input_ids"].shape[1]))
        loss = loss + m["nsp_loss_sum"] / rows
    return loss


MLM = StepSpec(
    name="mlm", forward=_forward, sums=_sums,
    weights=lambda batch: {"mlm": batch["masked_weights"].astype(jnp.float32)},
    objective=_objective,
    loss_sum=lambda sums: sums["mlm_loss_sum"] + sums.get("nsp_loss_sum", 0.0))

train_step = make_train_step(MLM)
train_step.__doc__ = "One MLM optimizer update (jaxbert.engine.step.make_train_step of MLM)."
eval_step = make_eval_step(MLM)


def summarize(sums: dict, prefix: str = "") -> dict:
    """Host side: metric sums -> means. Takes NumPy / Python numbers."""
    out = {}
    w = max(float(sums["mlm_weight"]), 1e-9)
    out[prefix + "mlm_loss"] = float(sums["mlm_loss_sum"]) / w
    out[prefix + "mlm_accuracy"] = float(sums["mlm_correct"]) / w
    loss = out[prefix + "mlm_loss"]
    if "nsp_count" in sums:
        n = max(float(sums["nsp_count"]), 1e-9)
        out[prefix + "nsp_loss"] = float(sums["nsp_loss_sum"]) / n
        out[prefix + "nsp_accuracy"] = float(sums["nsp_correct"]) / n
        loss += out[prefix + "nsp_loss"]
    out[prefix + "loss"] = loss
    for key in ("grad_norm", "update_norm", "param_norm", "learning_rate"):
        if key in sums:
            out[prefix + key] = float(sums[key])
    return out
