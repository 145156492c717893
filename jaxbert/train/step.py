"""The pure train and eval steps.

``train_step(state, batch, rng) -> (state, metrics)`` does one optimizer update
from a batch of ``accum`` micro-batches (a lax.scan sums their gradients).
The MLM loss is taken only at the masked positions: the model gathers them
before the vocabulary projection. Metrics come back as sums with their
denominators, normalised on the host by ``summarize``.

Batch keys (NumPy or jax arrays; the train batch has a leading accum axis):
  input_ids, token_type_ids, attention_mask  int32 [A, B, L]
  masked_positions, masked_labels            int32 [A, B, M]
  masked_weights                              float32 [A, B, M] (0 = padding slot)
  next_sentence_labels                        int32 [A, B] (NSP recipes only)
"""

from __future__ import annotations

from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # int32 [], optimizer updates done
    params: Any
    opt_state: Any
    apply_fn: Callable = flax.struct.field(pytree_node=False)
    tx: optax.GradientTransformation = flax.struct.field(pytree_node=False)
    schedule: Callable = flax.struct.field(pytree_node=False)
    # Also log the update's and the new params' global norms: two more reads of
    # every param per step (about a tenth of a TPU step's bytes for BERT-base).
    norm_metrics: bool = flax.struct.field(pytree_node=False, default=True)

    @classmethod
    def create(cls, apply_fn, params, tx, schedule, norm_metrics: bool = True) -> "TrainState":
        return cls(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                   apply_fn=apply_fn, tx=tx, schedule=schedule, norm_metrics=norm_metrics)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """-log softmax(logits)[label] over the last axis, in float32 at least: [..., V], [...] -> [...].

    float32 and wider logits go through optax. Narrower ones (bf16 compute) take
    the same value in float32 with a custom VJP whose gradient, softmax - onehot,
    comes back in the logits' dtype: autodiff formed it in float32, held it
    whole ([B, M, V], 9 MiB per sequence for bert-large) and rounded it to bf16
    for the decoder's backward matmul anyway.
    """
    if jnp.dtype(logits.dtype).itemsize >= 4:
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return _nll_narrow(logits, labels)


@jax.custom_vjp
def _nll_narrow(logits, labels):
    return _nll_narrow_fwd(logits, labels)[0]


def _nll_narrow_fwd(logits, labels):
    # The label's logit is picked from the narrow logits (widening it after is exact), so the
    # float32 logits feed only the reduction and XLA need not hold them.
    log_z = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0].astype(jnp.float32)
    return log_z - picked, (logits, labels, log_z)


def _nll_narrow_bwd(res, g):
    logits, labels, log_z = res
    probs = jnp.exp(logits.astype(jnp.float32) - log_z[..., None])
    V = logits.shape[-1]
    # the label's index as take_along_axis read it in the forward pass (a negative one counts from the end)
    index = jnp.where(labels < 0, labels.astype(jnp.int32) + V, labels.astype(jnp.int32))
    onehot = index[..., None] == jnp.arange(V, dtype=jnp.int32)
    grad = (probs - onehot.astype(jnp.float32)) * g[..., None].astype(jnp.float32)
    return grad.astype(logits.dtype), np.zeros(labels.shape, jax.dtypes.float0)


_nll_narrow.defvjp(_nll_narrow_fwd, _nll_narrow_bwd)


def _sums(params, apply_fn, mb, rng, deterministic):
    """Weighted loss sums for one micro-batch [B, ...]: (mlm_sum + nsp_sum, metric sums)."""
    out = apply_fn({"params": params}, mb["input_ids"], mb["token_type_ids"],
                   attention_mask=mb["attention_mask"], masked_positions=mb["masked_positions"],
                   deterministic=deterministic, rngs={"dropout": rng})
    # The loss in float32 at least (bf16 logits lose it there), never below the compute dtype.
    loss_dtype = jnp.promote_types(out.logits.dtype, jnp.float32)
    labels, weights = mb["masked_labels"], mb["masked_weights"].astype(loss_dtype)
    nll = cross_entropy(out.logits, labels)  # [B, M]
    correct = (jnp.argmax(out.logits, -1) == labels).astype(jnp.float32)
    m = {"mlm_loss_sum": jnp.sum(nll * weights), "mlm_correct": jnp.sum(correct * weights),
         "mlm_weight": jnp.sum(weights)}
    if "next_sentence_labels" in mb:
        nsp_logits = out.seq_relationship_logits.astype(loss_dtype)  # [B, 2]
        nsp_labels = mb["next_sentence_labels"]
        m["nsp_loss_sum"] = jnp.sum(optax.softmax_cross_entropy_with_integer_labels(nsp_logits, nsp_labels))
        m["nsp_correct"] = jnp.sum((jnp.argmax(nsp_logits, -1) == nsp_labels).astype(jnp.float32))
        m["nsp_count"] = jnp.asarray(nsp_labels.shape[0], jnp.float32)
    return m


def _global_sum(x, axis_name):
    x = jnp.sum(x)
    return x if axis_name is None else jax.lax.psum(x, axis_name)


def _l2(tree) -> jax.Array:
    return optax.global_norm(jax.tree_util.tree_map(
        lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32)), tree))


def train_step(state: TrainState, batch: dict, rng: jax.Array, axis_name: str | None = None):
    """One optimizer update. Under jax.pmap pass axis_name: gradients are pmean-ed over it.

    The objective is mean MLM loss over every masked token of the global batch
    (all micro-batches, all devices) plus, with NSP data, the mean NSP loss.
    """
    step_rng = jax.random.fold_in(rng, state.step)
    if axis_name is not None:  # each pmap device draws its own dropout masks
        step_rng = jax.random.fold_in(step_rng, jax.lax.axis_index(axis_name))
    n_dev = 1 if axis_name is None else jax.lax.psum(1, axis_name)
    # Denominators over the whole global batch, known before any forward pass.
    # pmean of the gradients divides by n_dev, so local objectives carry n_dev.
    mlm_den = jnp.maximum(_global_sum(batch["masked_weights"].astype(jnp.float32), axis_name), 1.0) / n_dev
    has_nsp = "next_sentence_labels" in batch
    # Sequences per device shard: every pmap device holds an equal share.
    nsp_den = float(batch["input_ids"].shape[0] * batch["input_ids"].shape[1])

    def objective(params, mb, mb_rng):
        m = _sums(params, state.apply_fn, mb, mb_rng, deterministic=False)
        loss = m["mlm_loss_sum"] / mlm_den
        if has_nsp:
            loss = loss + m["nsp_loss_sum"] / nsp_den
        return loss, m

    grads, sums = accumulate(jax.grad(objective, has_aux=True), state.params, batch, step_rng)
    if axis_name is not None:
        grads = jax.lax.pmean(grads, axis_name)
        sums = jax.lax.psum(sums, axis_name)
    return apply_gradients(state, grads, sums, sums["mlm_loss_sum"] + sums.get("nsp_loss_sum", 0.0))


def accumulate(grad_fn, params, batch: dict, step_rng: jax.Array):
    """(gradient sum, metric sums) of grad_fn over a batch's micro-batches [A, B, ...].

    grad_fn(params, micro-batch [B, ...], rng) -> (grads, metric sums); micro-batch i draws
    its dropout from fold_in(step_rng, i). A lax.scan adds them up when A > 1.
    """
    def micro(carry, xs):
        grads, sums = carry
        i, mb = xs
        g, m = grad_fn(params, mb, jax.random.fold_in(step_rng, i))
        grads = jax.tree_util.tree_map(jnp.add, grads, g)
        sums = jax.tree_util.tree_map(jnp.add, sums, m)
        return (grads, sums), None

    accum = batch["input_ids"].shape[0]
    first = jax.tree_util.tree_map(lambda x: x[0], batch)
    if accum == 1:
        # No loop: a scan of one would still zero and add a whole gradient tree.
        return grad_fn(params, first, jax.random.fold_in(step_rng, 0))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    sum_zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype),
                                       jax.eval_shape(grad_fn, params, first, step_rng)[1])
    (grads, sums), _ = jax.lax.scan(micro, (zeros, sum_zeros), (jnp.arange(accum), batch))
    return grads, sums


def apply_gradients(state: TrainState, grads, sums: dict, loss_sum: jax.Array):
    """The optimizer update from summed gradients, and the step's metrics: (new state, metrics).

    Shared by every train step (MLM here, the fine-tuning tasks in jaxbert.finetune.step):
    sums are the step's metric sums (already summed over devices), loss_sum the loss term
    whose finiteness, with the gradients' and params' norms, decides metrics["finite"].
    """
    # The gradients' norm, computed once: logged here and handed to the clipping
    # transformation (jaxbert.train.optim.clip_by_global_norm) instead of read again there.
    grad_norm = _l2(grads)
    tx = optax.with_extra_args_support(state.tx)
    updates, opt_state = tx.update(grads, state.opt_state, state.params, grad_norm=grad_norm)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(sums)
    metrics["grad_norm"] = grad_norm
    if state.norm_metrics:
        metrics["update_norm"] = _l2(updates)
        metrics["param_norm"] = _l2(params)
    metrics["learning_rate"] = jnp.asarray(state.schedule(state.step), jnp.float32)
    # A non-finite loss, gradient or new param stops the run (checked on the host).
    # (the gradients' norm is finite only if every gradient is; a finite update of finite params stays finite)
    metrics["finite"] = jnp.isfinite(loss_sum + grad_norm + metrics.get("param_norm", 0.0)).astype(jnp.float32)
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    return new_state, metrics


def eval_step(params, batch: dict, apply_fn, axis_name: str | None = None) -> dict:
    """Metric sums on one held-out batch [B, ...] (no accum axis), dropout off."""
    m = _sums(params, apply_fn, batch, jax.random.key(0), deterministic=True)
    if axis_name is not None:
        m = jax.lax.psum(m, axis_name)
    return m


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
