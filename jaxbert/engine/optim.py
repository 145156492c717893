"""Optimizers and learning-rate schedules, as registries, and the recipe section that picks them.

``OPTIMIZERS`` maps a name to the function that builds its optax transformation;
``SCHEDULES`` a name to the decay after warmup. The recipe's ``optim.name`` and
``optim.schedule`` are checked against them, so adding an optimizer is one function and
one entry here. Weight decay is masked off biases and LayerNorm params (as the original
BERT did); global-norm clipping goes in front. Gradient accumulation happens inside the
train step (a scan over micro-batches, jaxbert.engine.step), so one optimizer update is one
jitted call.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from jaxbert.engine.recipe import NON_NEGATIVE, POSITIVE, UNIT_OPEN, check_choice, check_ranges


@dataclasses.dataclass
class OptimSection:
    name: str = "adamw"  # one of OPTIMIZERS: adamw | lamb | stable_adamw
    learning_rate: float = 1e-4  # peak
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01  # never applied to biases and LayerNorm params
    schedule: str = "linear"  # one of SCHEDULES: linear | polynomial | wsd | 1-sqrt | constant (all after linear warmup)
    warmup_steps: int = 0
    decay_power: float = 1.0  # polynomial decay exponent
    end_lr_factor: float = 0.0  # final lr = learning_rate * end_lr_factor
    decay_fraction: float = 0.2  # wsd, 1-sqrt: share of the steps spent decaying at the end
    clip_norm: Optional[float] = 1.0  # global-norm clipping; None = off
    # dtype of AdamW's and LAMB's first moment: None (each param's own) | "float32" | "bfloat16"
    # (half its bytes; rounds m to 8 significant bits at every update)
    mu_dtype: Optional[str] = None

    def check(self, prefix: str = "optim.") -> None:
        check_choice(f"{prefix}name", self.name, tuple(OPTIMIZERS))
        check_choice(f"{prefix}schedule", self.schedule, tuple(SCHEDULES))
        check_choice(f"{prefix}mu_dtype", self.mu_dtype, (None, "float32", "bfloat16"))
        check_ranges(prefix, {
            "learning_rate": (self.learning_rate, *POSITIVE),
            "b1": (self.b1, *UNIT_OPEN),
            "b2": (self.b2, *UNIT_OPEN),
            "eps": (self.eps, *POSITIVE),
            "weight_decay": (self.weight_decay, *NON_NEGATIVE),
            "warmup_steps": (self.warmup_steps, *NON_NEGATIVE),
            "decay_power": (self.decay_power, *POSITIVE),
            "end_lr_factor": (self.end_lr_factor, lambda v: 0 <= v <= 1, "in [0, 1]"),
            "decay_fraction": (self.decay_fraction, lambda v: 0 < v <= 1, "in (0, 1]"),
            "clip_norm": (self.clip_norm, lambda v: v > 0, "> 0 (null turns clipping off)")})


# Param leaves named like this are never decayed: dense/LayerNorm/MLM biases and LayerNorm scales.
_NO_DECAY = ("bias", "scale")


def decay_mask(params):
    """True where weight decay applies: kernels and embedding tables."""
    def keep(path, _):
        last = path[-1]
        name = getattr(last, "key", getattr(last, "name", str(last)))
        return name not in _NO_DECAY
    return jax.tree_util.tree_map_with_path(keep, params)


def _polynomial(o: OptimSection, peak, end, rest: int, total: int):
    return optax.polynomial_schedule(peak, end, 1.0 if o.schedule == "linear" else o.decay_power, rest)


def _wsd(o: OptimSection, peak, end, rest: int, total: int):
    decay_steps = max(int(round(total * o.decay_fraction)), 1)
    stable = max(rest - decay_steps, 0)
    return optax.join_schedules([optax.constant_schedule(peak), optax.linear_schedule(peak, end, decay_steps)],
                                [stable])


def _one_minus_sqrt(o: OptimSection, peak, end, rest: int, total: int):
    """Hold the peak, then over the last decay_fraction of the steps
    lr = end + (peak - end) * (1 - sqrt(progress)), progress 0 -> 1 across the decay
    (ModernBERT's decay phase; Hägele et al. 2024): it falls fastest at the start of
    the decay and flattens towards the end, where linear decay keeps falling."""
    decay_steps = max(int(round(total * o.decay_fraction)), 1)
    stable = max(rest - decay_steps, 0)

    def decay(count):
        progress = jnp.clip(count / decay_steps, 0.0, 1.0)
        return end + (peak - end) * (1.0 - jnp.sqrt(progress))
    return optax.join_schedules([optax.constant_schedule(peak), decay], [stable])


# The decay after warmup: (section, peak, end lr, steps after warmup, total steps) -> optax schedule.
SCHEDULES = {
    "linear": _polynomial,
    "polynomial": _polynomial,
    "wsd": _wsd,  # warmup-stable-decay: hold the peak, decay linearly over the last decay_fraction
    "1-sqrt": _one_minus_sqrt,  # as wsd, decaying as 1 - sqrt(progress); decay_fraction 1: the whole run
    "constant": lambda o, peak, end, rest, total: optax.constant_schedule(peak),
}


def make_schedule(o: OptimSection, total_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to o.learning_rate, then the decay o.schedule names.

    linear / polynomial: decay to learning_rate * end_lr_factor at total_steps.
    wsd (warmup-stable-decay): hold the peak, then decay linearly over the last
    decay_fraction of the steps. 1-sqrt: the same with a 1 - sqrt(progress) decay.
    constant: hold the peak.
    """
    peak, end = o.learning_rate, o.learning_rate * o.end_lr_factor
    warmup = min(o.warmup_steps, total_steps)
    rest = max(total_steps - warmup, 1)
    decay = SCHEDULES[o.schedule](o, peak, end, rest, total_steps)
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


def _adamw(o: OptimSection, schedule, mu_dtype):
    return optax.adamw(schedule, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay, mask=decay_mask,
                       mu_dtype=mu_dtype)


def _lamb(o: OptimSection, schedule, mu_dtype):
    # optax.lamb's own chain (same transformations, same state), which takes no mu_dtype itself
    return optax.chain(optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps, mu_dtype=mu_dtype),
                       optax.add_decayed_weights(o.weight_decay, mask=decay_mask),
                       optax.scale_by_trust_ratio(),
                       optax.scale_by_learning_rate(schedule))


class StableClipState(NamedTuple):
    inner: optax.OptState  # (scale_by_adam's state, add_decayed_weights')


def scale_by_stable_clip(inner: optax.GradientTransformation, b2: float, eps: float):
    """AdamW's per-tensor update clipping (Wortsman et al. 2023, "Stable and low-precision training
    for large-scale vision-language models"; ModernBERT's StableAdamW, as optimi implements it).

    ``inner`` is ``optax.chain(optax.scale_by_adam(...), optax.add_decayed_weights(...))``; its
    update is divided, tensor by tensor, by max(1, RMS_t) where
    RMS_t = sqrt(mean(g_t^2 / max(v_hat_t, eps^2))), v_hat_t the bias-corrected second moment that
    scale_by_adam just updated (read from its state, so no second copy is kept). A tensor whose
    gradient jumps far past its running second moment takes a smaller step; otherwise this is AdamW.
    """
    def init(params):
        return StableClipState(inner.init(params))

    def update(updates, state, params=None):
        out, inner_state = inner.update(updates, state.inner, params)
        adam = inner_state[0]  # optax.ScaleByAdamState(count, mu, nu)
        correction = 1 - b2 ** adam.count.astype(jnp.float32)

        def clip(u, g, nu):
            v_hat = nu.astype(jnp.float32) / correction
            rms = jnp.sqrt(jnp.mean(jnp.square(g.astype(jnp.float32)) / jnp.maximum(v_hat, eps * eps)))
            return (u / jnp.maximum(1.0, rms)).astype(u.dtype)

        return jax.tree_util.tree_map(clip, out, updates, adam.nu), StableClipState(inner_state)

    return optax.GradientTransformation(init, update)


def _stable_adamw(o: OptimSection, schedule, mu_dtype):
    """StableAdamW (ModernBERT's optimizer) from optax parts:
    chain(scale_by_stable_clip(chain(scale_by_adam, add_decayed_weights)), scale_by_learning_rate).

    - scale_by_adam(b1, b2, eps): AdamW's direction m_hat / (sqrt(v_hat) + eps).
    - add_decayed_weights(weight_decay / learning_rate): the decay, fully decoupled from the learning
      rate as ModernBERT's recipe (decoupled_stableadamw, weight_decay 1e-5) has it: the learning
      rate below scales it back, so a step decays by weight_decay * lr_t / peak lr, following the
      schedule but not its peak. Off biases and LayerNorm params (filter_bias_norm_wd).
    - scale_by_stable_clip: the per-tensor update clipping above, over direction and decay alike
      (optimi divides the tensor's learning rate, which scales both).
    - scale_by_learning_rate(schedule).
    Use it without global-norm clipping (optim.clip_norm: null): update clipping replaces it.
    """
    inner = optax.chain(optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps, mu_dtype=mu_dtype),
                        optax.add_decayed_weights(o.weight_decay / o.learning_rate, mask=decay_mask))
    return optax.chain(scale_by_stable_clip(inner, o.b2, o.eps), optax.scale_by_learning_rate(schedule))


# optim.name -> (section, schedule, first-moment dtype or None) -> optax transformation (clipping added after).
OPTIMIZERS = {"adamw": _adamw, "lamb": _lamb, "stable_adamw": _stable_adamw}


def make_optimizer(o: OptimSection, total_steps: int):
    """Returns (optax transformation, schedule). Updates are applied with
    optax.apply_updates; ``update`` takes ``grad_norm=`` (see clip_by_global_norm)."""
    schedule = make_schedule(o, total_steps)
    mu_dtype = None if o.mu_dtype is None else jnp.dtype(o.mu_dtype)  # None: each param's own dtype
    core = OPTIMIZERS[o.name](o, schedule, mu_dtype)
    parts = [clip_by_global_norm(o.clip_norm)] if o.clip_norm else []
    return optax.chain(*parts, core), schedule
