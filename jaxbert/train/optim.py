"""Optimizers and learning-rate schedules for pretraining.

AdamW (the default) and LAMB, both with weight decay masked off biases and
LayerNorm params (as the original BERT did), behind global-norm clipping.
Gradient accumulation happens inside the train step (a scan over
micro-batches, see step.py), so one optimizer update is one jitted call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxbert.train.recipe import OptimSection

# Param leaves named like this are never decayed: dense/LayerNorm/MLM biases and LayerNorm scales.
_NO_DECAY = ("bias", "scale")


def decay_mask(params):
    """True where weight decay applies: kernels and embedding tables."""
    def keep(path, _):
        last = path[-1]
        name = getattr(last, "key", getattr(last, "name", str(last)))
        return name not in _NO_DECAY
    return jax.tree_util.tree_map_with_path(keep, params)


def make_schedule(o: OptimSection, total_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to o.learning_rate, then the decay o.schedule names.

    linear / polynomial: decay to learning_rate * end_lr_factor at total_steps.
    wsd (warmup-stable-decay): hold the peak, then decay linearly over the last
    decay_fraction of the steps. constant: hold the peak.
    """
    peak, end = o.learning_rate, o.learning_rate * o.end_lr_factor
    warmup = min(o.warmup_steps, total_steps)
    rest = max(total_steps - warmup, 1)
    if o.schedule in ("linear", "polynomial"):
        power = 1.0 if o.schedule == "linear" else o.decay_power
        decay = optax.polynomial_schedule(peak, end, power, rest)
    elif o.schedule == "wsd":
        decay_steps = max(int(round(total_steps * o.decay_fraction)), 1)
        stable = max(rest - decay_steps, 0)
        decay = optax.join_schedules(
            [optax.constant_schedule(peak), optax.linear_schedule(peak, end, decay_steps)], [stable])
    elif o.schedule == "constant":
        decay = optax.constant_schedule(peak)
    else:
        raise ValueError(f"optim.schedule {o.schedule!r} is unknown")
    if warmup > 0:
        decay = optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])
    return _in_default_float(decay)


def _in_default_float(schedule: optax.Schedule) -> optax.Schedule:
    """optax counts updates in int32, and int32 / int is float32 even with
    jax_enable_x64: a float64 run would take float32 learning rates (5e-4 is off
    by 4.7e-8 relative). Evaluate at a float count of the default float dtype."""
    def evaluate(count):
        return schedule(jnp.asarray(count, jnp.result_type(float)))
    return evaluate


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformationExtraArgs:
    """optax.clip_by_global_norm (same state, same arithmetic) that takes the
    norm as ``grad_norm=`` when the caller has it: the train step logs the
    gradients' norm anyway, and computing it once reads every gradient once."""
    def init(params):
        return optax.EmptyState()

    def update(updates, state, params=None, *, grad_norm=None, **extra_args):
        del params, extra_args
        norm = optax.tree.norm(updates) if grad_norm is None else grad_norm
        keep = norm < max_norm
        clipped = jax.tree_util.tree_map(
            lambda t: jax.lax.select(keep, t, (t / norm.astype(t.dtype)) * max_norm), updates)
        return clipped, state

    return optax.GradientTransformationExtraArgs(init, update)


def make_optimizer(o: OptimSection, total_steps: int):
    """Returns (optax transformation, schedule). Updates are applied with
    optax.apply_updates; ``update`` takes ``grad_norm=`` (see clip_by_global_norm)."""
    schedule = make_schedule(o, total_steps)
    mu_dtype = None if o.mu_dtype is None else jnp.dtype(o.mu_dtype)  # None: each param's own dtype
    if o.name == "adamw":
        core = optax.adamw(schedule, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay,
                           mask=decay_mask, mu_dtype=mu_dtype)
    elif o.name == "lamb":
        # optax.lamb's own chain (same transformations, same state), which takes no mu_dtype itself
        core = optax.chain(optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps, mu_dtype=mu_dtype),
                           optax.add_decayed_weights(o.weight_decay, mask=decay_mask),
                           optax.scale_by_trust_ratio(),
                           optax.scale_by_learning_rate(schedule))
    else:
        raise ValueError(f"optim.name {o.name!r} is unknown")
    parts = [clip_by_global_norm(o.clip_norm)] if o.clip_norm else []
    return optax.chain(*parts, core), schedule
