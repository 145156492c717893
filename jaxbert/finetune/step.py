"""The fine-tuning train and eval steps, one pair per task kind, for the pretraining runners.

``make_train_step(kind)(state, batch, rng, axis_name=None) -> (state, metrics)`` is the
shape MeshRunner / PmapRunner.compile_train take: batch arrays are [A, B, ...] (A
micro-batches summed by jaxbert.train.step.accumulate), the objective is the mean loss over
every weighted target of the global batch, and jaxbert.train.step.apply_gradients clips,
updates and flags a non-finite loss. ``make_eval_step(kind)(params, batch, apply_fn)`` returns
the loss sums and the per-row outputs that scoring needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxbert.finetune.losses import MODEL_INPUTS, outputs, task_sums, weights
from jaxbert.train.step import accumulate, apply_gradients


def _forward(apply_fn, params, batch, deterministic: bool, rng=None):
    rngs = {} if rng is None else {"dropout": rng}
    return apply_fn({"params": params}, *(batch[k] for k in MODEL_INPUTS), deterministic=deterministic, rngs=rngs)


def make_train_step(kind: str):
    def train_step(state, batch: dict, rng: jax.Array, axis_name: str | None = None):
        step_rng = jax.random.fold_in(rng, state.step)
        if axis_name is not None:  # each pmap device draws its own dropout masks
            step_rng = jax.random.fold_in(step_rng, jax.lax.axis_index(axis_name))
        n_dev = 1 if axis_name is None else jax.lax.psum(1, axis_name)
        # The denominator over the whole global batch, before any forward pass; pmean of the
        # gradients divides by n_dev, so each device's objective carries n_dev.
        total = jnp.sum(weights(kind, batch))
        if axis_name is not None:
            total = jax.lax.psum(total, axis_name)
        den = jnp.maximum(total, 1.0) / n_dev

        def objective(params, mb, mb_rng):
            m = task_sums(kind, _forward(state.apply_fn, params, mb, False, mb_rng), mb)
            return m["loss_sum"] / den, m

        grads, sums = accumulate(jax.grad(objective, has_aux=True), state.params, batch, step_rng)
        if axis_name is not None:
            grads = jax.lax.pmean(grads, axis_name)
            sums = jax.lax.psum(sums, axis_name)
        return apply_gradients(state, grads, sums, sums["loss_sum"])
    train_step.__name__ = f"{kind}_train_step"
    return train_step


def make_eval_step(kind: str):
    def eval_step(params, batch: dict, apply_fn, axis_name: str | None = None) -> dict:
        """{"sums": loss sums, "outputs": per-row logits} for one batch [B, ...], dropout off."""
        out = _forward(apply_fn, params, batch, True)
        sums = task_sums(kind, out, batch)
        if axis_name is not None:
            sums = jax.lax.psum(sums, axis_name)
        return {"sums": sums, "outputs": outputs(kind, out)}
    eval_step.__name__ = f"{kind}_eval_step"
    return eval_step
