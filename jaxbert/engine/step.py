"""One train-step builder for every task: accumulation, the optimizer update, mixed-precision losses.

A task's objective is a ``StepSpec``: the weights its loss is averaged over (known before
any forward pass), the weighted sums of one micro-batch, and the objective those sums make.
``make_train_step(spec)`` turns it into the pure step the runners compile,
``train_step(state, batch [A, B, ...], rng, axis_name=None) -> (state, metrics)``: a lax.scan
sums the micro-batches' gradients, gradients are clipped and applied by the state's
optimizer, and ``metrics`` carries the sums, the norms, the learning rate and ``finite``
(a NaN or Inf in the loss, a gradient or a param), which the engine's loop checks on the host.
``make_eval_step(spec)`` is the held-out counterpart, dropout off.

Per-step randomness is ``fold_in(rng, state.step)`` (and the micro-batch index, and under
pmap the device index), so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxbert.model.options import cpu_target


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


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """A task's objective, as the step builder takes it.

    Attributes:
      name: names the compiled step functions ("mlm", "classification", ...).
      forward: (params, apply_fn, micro-batch [B, ...], rng, deterministic) -> the model's output.
      sums: (model output, micro-batch) -> dict of weighted metric sums (float32 scalars).
      weights: batch [A, B, ...] -> {denominator name: the loss weights whose global sum
        averages that loss term}; summed over every micro-batch and device before any forward pass.
      objective: (sums, {denominator name: global sum / devices}, batch) -> the scalar a device
        differentiates; pmean of the gradients then averages over the devices.
      loss_sum: sums -> the loss term whose finiteness (with the norms) decides ``finite``.
    """

    name: str
    forward: Callable
    sums: Callable
    weights: Callable
    objective: Callable
    loss_sum: Callable


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


def predicted(logits: jax.Array) -> jax.Array:
    """jnp.argmax(logits, -1): the first index of the largest entry of the last axis (of the first NaN, if any).

    Where the step is compiled for a CPU it is taken in two passes: XLA's CPU backend runs argmax's paired
    (value, index) reduction at about 2 ns an element (144 ms of the 3.1 s step of a 6-layer, hidden-384
    ModernBERT at 8 x 512, 30% masked, V = 50,368), a plain max at a tenth of that. The last axis is viewed
    as chunks (the smallest divisor of V at least its square root: 787 for 50,368, 5,087 for 30,522); a max
    and a NaN test over each chunk find the first chunk holding the answer, and argmax runs over that chunk
    alone (44 ms there).
    """
    if not cpu_target():
        return jnp.argmax(logits, -1)
    V = logits.shape[-1]
    q = chunk_size(V)
    if q == V:  # V prime (or tiny): one chunk
        return jnp.argmax(logits, -1)
    chunks = logits.reshape(*logits.shape[:-1], V // q, q)
    # XLA's CPU max passes over NaN (jnp.max of [1, nan] gives 1 there), so NaNs are looked for on their own
    nans = jnp.any(jnp.isnan(chunks), -1)
    tops = jnp.max(chunks, -1)
    holds = jnp.where(jnp.any(nans, -1, keepdims=True), nans, tops == jnp.max(tops, -1, keepdims=True))
    return _first_in_chunks(chunks, holds)  # the first chunk holding a NaN, else the first holding the largest


def _first_in_chunks(chunks: jax.Array, holds: jax.Array) -> jax.Array:
    """chunks [.., n, q], holds bool [.., n]: argmax over the first chunk that holds the answer, as a row index."""
    first = jnp.argmax(holds, -1)
    inside = jnp.take_along_axis(chunks, first[..., None, None], axis=-2)[..., 0, :]
    return first * chunks.shape[-1] + jnp.argmax(inside, -1)


def nll_and_predicted(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(cross_entropy(logits, labels), predicted(logits)): the MLM loss at each slot and the model's guess.

    Where the step is compiled for a CPU and the logits are float32 or wider, both come from one custom VJP
    (_nll_predicted) that reads the [.., V] logits twice forward and once backward: a max over chunks of the
    row (the chunked argmax's maxima, whose max is logsumexp's shift), the sum of exp(logits - max), and in
    the backward pass softmax - onehot formed in one sweep. Autodiff's form, as XLA's CPU backend ran it, made
    about ten passes over the logits (a second max, a NaN test per chunk, exp(logits - max) kept for the
    backward, its product with the cotangent, ...): 227 ms of a 6-layer, hidden-384 ModernBERT's 1.94 s step
    at 8 x 512, 30% masked, V = 50,368 (benchmarks/modernbert_cpu_profile.py). The same arithmetic as
    jax.nn.logsumexp and optax, so the loss is the same bits; the gradient differs by rounding only. Elsewhere,
    for bf16 logits and for vocabularies under CPU_FUSED_MIN_VOCAB, cross_entropy and predicted as they are.
    """
    if not cpu_target() or jnp.dtype(logits.dtype).itemsize < 4 or logits.shape[-1] < CPU_FUSED_MIN_VOCAB:
        return cross_entropy(logits, labels), predicted(logits)
    return _nll_predicted(logits, labels)


# Vocabularies of this many entries or more take nll_and_predicted's custom VJP on a CPU (and RTD's sampling by the
# distribution function, jaxbert.train.rtd): below it the passes over the logits cost less than what the custom
# forms add to every compile (about 4% of a tiny BERT's MLM step), and the tiny demos keep their numbers.
CPU_FUSED_MIN_VOCAB = 16384


def chunk_size(V: int) -> int:
    """The smallest divisor of V at least its square root (787 for 50,368, 5,087 for 30,522; V when V is prime):
    the length of the chunks a CPU step reads a vocabulary row in."""
    return next(d for d in range(1, V + 1) if V % d == 0 and d * d >= V)


@jax.custom_vjp
def _nll_predicted(logits, labels):
    return _nll_predicted_fwd(logits, labels)[0]


def _nll_predicted_fwd(logits, labels):
    # Every pass reads the logits in one shape, [.., V / q, q] (XLA's CPU backend formed them once per shape)
    lead, V = logits.shape[:-1], logits.shape[-1]
    q = chunk_size(V)
    chunks = jax.lax.optimization_barrier(logits.reshape(*lead, V // q, q))  # formed once, whatever reads them
    tops = jnp.max(chunks, -1)  # [.., V / q]: the one full max, shared by the argmax and the shift
    # read from tops (XLA otherwise folds the two maxima into a second pass over the logits)
    top = jnp.max(jax.lax.optimization_barrier(tops), -1)
    shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top)))  # as jax.nn.logsumexp
    total = jnp.sum(jnp.exp(chunks - shift[..., None, None]), (-2, -1))
    picked = jnp.take_along_axis(chunks.reshape(*lead, V), labels[..., None], axis=-1)[..., 0]
    nll = (jnp.log(total) + shift) - picked
    # the first chunk holding the row's largest, then the first largest inside it; a NaN in a row (which XLA's
    # CPU max passes over) makes its sum NaN, and then the whole argmax decides
    guess = jax.lax.cond(jnp.any(jnp.isnan(total)),
                         lambda c: jnp.argmax(c.reshape(*lead, V), -1),  # chunks in, as read
                         lambda c: _first_in_chunks(c, tops == top[..., None]), chunks)
    return (nll, guess), (chunks, labels, shift, total)


def _nll_predicted_bwd(res, g):
    chunks, labels, shift, total = res
    g = g[0]  # the guess's cotangent is float0
    lead, (n, q) = chunks.shape[:-2], chunks.shape[-2:]
    index = jnp.where(labels < 0, labels.astype(jnp.int32) + n * q, labels.astype(jnp.int32))
    onehot = index[..., None, None] == (jnp.arange(n, dtype=jnp.int32)[:, None] * q + jnp.arange(q, dtype=jnp.int32))
    # d/dlogits of log(sum exp(logits - shift)) - logits[label], in one sweep over the logits
    grad = (jnp.exp(chunks - shift[..., None, None]) * (g / total)[..., None, None]
            - jnp.where(onehot, g[..., None, None], 0))
    return grad.astype(chunks.dtype).reshape(*lead, n * q), np.zeros(labels.shape, jax.dtypes.float0)


_nll_predicted.defvjp(_nll_predicted_fwd, _nll_predicted_bwd)


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


def _l2(tree) -> jax.Array:
    return optax.global_norm(jax.tree_util.tree_map(
        lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32)), tree))


def make_train_step(spec: StepSpec):
    """The pure train step of a task (see the module docstring). Under jax.pmap pass axis_name:
    gradients are pmean-ed and sums psum-ed over it."""
    def train_step(state: TrainState, batch: dict, rng: jax.Array, axis_name: str | None = None):
        step_rng = jax.random.fold_in(rng, state.step)
        if axis_name is not None:  # each pmap device draws its own dropout masks
            step_rng = jax.random.fold_in(step_rng, jax.lax.axis_index(axis_name))
        n_dev = 1 if axis_name is None else jax.lax.psum(1, axis_name)
        # Denominators over the whole global batch, known before any forward pass.
        # pmean of the gradients divides by n_dev, so local objectives carry n_dev.
        dens = {}
        for key, w in spec.weights(batch).items():
            total = jnp.sum(w)
            if axis_name is not None:
                total = jax.lax.psum(total, axis_name)
            dens[key] = jnp.maximum(total, 1.0) / n_dev

        def objective(params, mb, mb_rng):
            m = spec.sums(spec.forward(params, state.apply_fn, mb, mb_rng, False), mb)
            return spec.objective(m, dens, batch), m

        grads, sums = accumulate(jax.grad(objective, has_aux=True), state.params, batch, step_rng)
        if axis_name is not None:
            grads = jax.lax.pmean(grads, axis_name)
            sums = jax.lax.psum(sums, axis_name)
        return apply_gradients(state, grads, sums, spec.loss_sum(sums))
    train_step.__name__ = f"{spec.name}_train_step"
    return train_step


def make_eval_step(spec: StepSpec, outputs: Callable | None = None):
    """eval_step(params, batch [B, ...], apply_fn, axis_name=None): the metric sums on one held-out
    batch, dropout off; with ``outputs`` (model output -> per-row arrays) {"sums", "outputs"}."""
    def eval_step(params, batch: dict, apply_fn, axis_name: str | None = None):
        out = spec.forward(params, apply_fn, batch, jax.random.key(0), True)
        m = spec.sums(out, batch)
        if axis_name is not None:
            m = jax.lax.psum(m, axis_name)
        return m if outputs is None else {"sums": m, "outputs": outputs(out)}
    eval_step.__name__ = f"{spec.name}_eval_step"
    return eval_step


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

    sums are the step's metric sums (already summed over devices), loss_sum the loss term
    whose finiteness, with the gradients' and params' norms, decides metrics["finite"].
    """
    # The gradients' norm, computed once: logged here and handed to the clipping
    # transformation (jaxbert.engine.optim.clip_by_global_norm) instead of read again there.
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
