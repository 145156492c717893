"""Optimizers and learning-rate schedules, as registries, and the recipe sections that pick them.

``OPTIMIZERS`` maps a name to its recipe section: a dataclass of ``OptimSection`` with the
optimizer's own keys and defaults (Lion's b2 is 0.99, AdamW's 0.999) and a ``transform``
that builds its optax transformation. The recipe's ``optim.name`` picks the section, so a
key the chosen optimizer does not have (``eps`` for Lion) is refused by name. Adding an
optimizer is one section class and one entry in ``OPTIMIZERS``.

What every optimizer shares sits in ``OptimSection`` itself: the peak learning rate, the
schedule (``SCHEDULES`` maps a name to the decay after warmup; adding one is one function
and one entry) and global-norm clipping, which goes in front of the optimizer. Weight decay
is masked off biases and LayerNorm params (as the original BERT did). Gradient accumulation
happens inside the train step (a scan over micro-batches, jaxbert.engine.step), so one
optimizer update is one jitted call.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from jaxbert.engine.recipe import NON_NEGATIVE, POSITIVE, UNIT_OPEN, RecipeError, check_choice, check_ranges

MOMENT_DTYPES = (None, "float32", "bfloat16")


@dataclasses.dataclass
class OptimSection:
    """The keys every optimizer has; each registered optimizer's section adds its own.

    ``OptimSection(name=..., ...)`` builds the section registered under that name (AdamW's by
    default), so ``OptimSection(learning_rate=1e-3)`` is an AdamW section as it always was.
    """
    name: str = "adamw"  # a key of OPTIMIZERS
    learning_rate: float = 1e-4  # peak
    schedule: str = "linear"  # a key of SCHEDULES (after linear warmup): linear | polynomial | wsd | 1-sqrt | cosine | constant
    warmup_steps: int = 0  # > 0: linear warmup over this many steps
    warmup_ratio: float = 0.0  # when warmup_steps is 0: warm up over this share of the total steps
    decay_power: float = 1.0  # polynomial decay exponent
    end_lr_factor: float = 0.0  # final lr = learning_rate * end_lr_factor
    decay_fraction: float = 0.2  # wsd, 1-sqrt: share of the steps spent decaying at the end
    clip_norm: Optional[float] = 1.0  # global-norm clipping; None = off

    # Old keys of this optimizer's section -> their new names (a recipe using one gets a DeprecationWarning).
    RENAMED: ClassVar[dict] = {}

    def __new__(cls, *args, **kwargs):
        if cls is OptimSection:  # the base picks the registered section of the name asked for
            name = args[0] if args else kwargs.get("name", "adamw")
            if name not in OPTIMIZERS:
                raise RecipeError(f"optim.name: {name!r} is not one of {tuple(OPTIMIZERS)}")
            cls = OPTIMIZERS[name]
        return super().__new__(cls)

    @classmethod
    def variant(cls, data: dict, prefix: str = "optim."):
        """The section class a recipe's mapping asks for by its name (jaxbert.engine.recipe.build)."""
        name = data.get("name", "adamw")
        check_choice(f"{prefix}name", name, tuple(OPTIMIZERS))
        return OPTIMIZERS[name]

    @classmethod
    def keys_owner(cls) -> str:
        """Who the section's keys belong to, in an unknown-key refusal."""
        return f"optimizer {cls.name}"

    def transform(self, schedule) -> optax.GradientTransformation:
        """The optimizer's optax transformation, taking its learning rate from ``schedule``
        (global-norm clipping is put in front by make_optimizer)."""
        raise NotImplementedError(f"{type(self).__name__} builds no optimizer: register a section in OPTIMIZERS")

    def warmup(self, total_steps: int) -> int:
        """Warmup steps of a run of total_steps: warmup_steps, or warmup_ratio of the total."""
        return self.warmup_steps or int(round(self.warmup_ratio * total_steps))

    def eval_params(self, state):
        """The params evaluation and export read from a train state (``.params``, and ``.opt_state``: the
        chain make_optimizer builds, clipping first when it is on): the params trained, by default. An
        optimizer that evaluates at another point (schedule-free AdamW's average, an EMA) overrides it with a
        pure function of the state's arrays; the runner applies it (jaxbert.engine.parallel, params_of)."""
        return state.params

    def check(self, prefix: str = "optim.") -> None:
        check_choice(f"{prefix}name", self.name, tuple(OPTIMIZERS))
        if not isinstance(self, OPTIMIZERS[self.name]):
            raise RecipeError(f"{prefix}name: {self.name!r} is registered as {OPTIMIZERS[self.name].__name__}, "
                              f"not {type(self).__name__}")
        check_choice(f"{prefix}schedule", self.schedule, tuple(SCHEDULES))
        check_ranges(prefix, {
            "learning_rate": (self.learning_rate, *POSITIVE),
            "warmup_steps": (self.warmup_steps, *NON_NEGATIVE),
            "warmup_ratio": (self.warmup_ratio, *UNIT_OPEN),
            "decay_power": (self.decay_power, *POSITIVE),
            "end_lr_factor": (self.end_lr_factor, lambda v: 0 <= v <= 1, "in [0, 1]"),
            "decay_fraction": (self.decay_fraction, lambda v: 0 < v <= 1, "in (0, 1]"),
            "clip_norm": (self.clip_norm, lambda v: v > 0, "> 0 (null turns clipping off)")})


def _moment_dtype(name: Optional[str]):
    """A section's mu_dtype as a dtype; None keeps each param's own."""
    return None if name is None else jnp.dtype(name)


def _check_adam_like(o, prefix: str, decay_key: str) -> None:
    """b1, b2, eps, the decay under decay_key and mu_dtype: the keys AdamW, LAMB and StableAdamW share."""
    check_choice(f"{prefix}mu_dtype", o.mu_dtype, MOMENT_DTYPES)
    check_ranges(prefix, {"b1": (o.b1, *UNIT_OPEN), "b2": (o.b2, *UNIT_OPEN), "eps": (o.eps, *POSITIVE),
                          decay_key: (getattr(o, decay_key), *NON_NEGATIVE)})


# Param leaves named like this are never decayed: dense/LayerNorm/MLM biases and LayerNorm scales.
_NO_DECAY = ("bias", "scale")


def decay_mask(params):
    """True where weight decay applies: kernels and embedding tables."""
    def keep(path, _):
        last = path[-1]
        name = getattr(last, "key", getattr(last, "name", str(last)))
        return name not in _NO_DECAY
    return jax.tree_util.tree_map_with_path(keep, params)


# ---- schedules ---------------------------------------------------------------------------
def _polynomial(o: OptimSection, peak, end, rest: int, total: int):
    return optax.polynomial_schedule(peak, end, 1.0 if o.schedule == "linear" else o.decay_power, rest)


def _decay_steps(o: OptimSection, rest: int, total: int) -> int:
    """wsd's and 1-sqrt's decay: decay_fraction of the run's steps, but no more than the rest after
    warmup (rest), so that the lr reaches end_lr_factor * peak at the last step however long the warmup."""
    return min(max(int(round(total * o.decay_fraction)), 1), rest)


def _wsd(o: OptimSection, peak, end, rest: int, total: int):
    decay_steps = _decay_steps(o, rest, total)
    stable = rest - decay_steps
    return optax.join_schedules([optax.constant_schedule(peak), optax.linear_schedule(peak, end, decay_steps)],
                                [stable])


def _one_minus_sqrt(o: OptimSection, peak, end, rest: int, total: int):
    """Hold the peak, then over the last decay_fraction of the steps
    lr = end + (peak - end) * (1 - sqrt(progress)), progress 0 -> 1 across the decay
    (ModernBERT's decay phase; Hägele et al. 2024): it falls fastest at the start of
    the decay and flattens towards the end, where linear decay keeps falling."""
    decay_steps = _decay_steps(o, rest, total)
    stable = rest - decay_steps

    def decay(count):
        progress = jnp.clip(count / decay_steps, 0.0, 1.0)
        return end + (peak - end) * (1.0 - jnp.sqrt(progress))
    return optax.join_schedules([optax.constant_schedule(peak), decay], [stable])


def _cosine(o: OptimSection, peak, end, rest: int, total: int):
    """Half a cosine from the peak to the end lr over every step after warmup (Loshchilov & Hutter 2017,
    without restarts; nomic's contrastors and many embedding recipes): lr = end + (peak - end) *
    (1 + cos(pi * progress)) / 2."""
    def decay(count):
        progress = jnp.clip(count / rest, 0.0, 1.0)
        return end + (peak - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
    return decay


# The decay after warmup: (section, peak, end lr, steps after warmup, total steps) -> optax schedule.
SCHEDULES = {
    "linear": _polynomial,
    "polynomial": _polynomial,
    "wsd": _wsd,  # warmup-stable-decay: hold the peak, decay linearly over the last decay_fraction
    "1-sqrt": _one_minus_sqrt,  # as wsd, decaying as 1 - sqrt(progress); decay_fraction 1: the whole run
    "cosine": _cosine,  # half a cosine to the end lr over every step after warmup
    "constant": lambda o, peak, end, rest, total: optax.constant_schedule(peak),
}


def make_schedule(o: OptimSection, total_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to o.learning_rate (o.warmup(total_steps) steps), then the decay o.schedule names.

    linear / polynomial: decay to learning_rate * end_lr_factor at total_steps.
    wsd (warmup-stable-decay): hold the peak, then decay linearly over the last
    decay_fraction of the steps (at most the steps after warmup: decay_fraction 1 decays from the
    end of warmup), reaching learning_rate * end_lr_factor at total_steps. 1-sqrt: the same with a
    1 - sqrt(progress) decay. cosine: half a cosine from the peak to learning_rate * end_lr_factor over
    every step after warmup.
    constant: hold the peak.
    """
    peak, end = o.learning_rate, o.learning_rate * o.end_lr_factor
    warmup = min(o.warmup(total_steps), total_steps)
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


# ---- the optimizers ----------------------------------------------------------------------
@dataclasses.dataclass
class AdamWSection(OptimSection):
    """AdamW (Loshchilov & Hutter): optax.adamw, the decay off biases and LayerNorm params."""
    name: str = "adamw"
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01  # decoupled, scaled by the learning rate at each step
    # dtype of the first moment: None (each param's own) | "float32" | "bfloat16" (half its bytes;
    # rounds m to 8 significant bits at every update)
    mu_dtype: Optional[str] = None

    def check(self, prefix: str = "optim.") -> None:
        super().check(prefix)
        _check_adam_like(self, prefix, "weight_decay")

    def transform(self, schedule):
        return optax.adamw(schedule, b1=self.b1, b2=self.b2, eps=self.eps, weight_decay=self.weight_decay,
                           mask=decay_mask, mu_dtype=_moment_dtype(self.mu_dtype))


@dataclasses.dataclass
class LambSection(AdamWSection):
    """LAMB (You et al.): Adam's direction plus the decay, scaled per tensor by the trust ratio."""
    name: str = "lamb"

    def transform(self, schedule):
        # optax.lamb's own chain (same transformations, same state), which takes no mu_dtype itself
        return optax.chain(optax.scale_by_adam(b1=self.b1, b2=self.b2, eps=self.eps,
                                               mu_dtype=_moment_dtype(self.mu_dtype)),
                           optax.add_decayed_weights(self.weight_decay, mask=decay_mask),
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


@dataclasses.dataclass
class StableAdamWSection(OptimSection):
    """StableAdamW (ModernBERT's optimizer) from optax parts:
    chain(scale_by_stable_clip(chain(scale_by_adam, add_decayed_weights)), scale_by_learning_rate).

    - scale_by_adam(b1, b2, eps): AdamW's direction m_hat / (sqrt(v_hat) + eps).
    - add_decayed_weights(decoupled_weight_decay / learning_rate): the decay, fully decoupled from
      the learning rate as ModernBERT's recipe (decoupled_stableadamw, weight_decay 1e-5) has it: the
      learning rate below scales it back, so a step decays each weight by
      decoupled_weight_decay * lr_t / learning_rate, following the schedule but not its peak (AdamW's
      weight_decay is multiplied by lr_t itself). Off biases and LayerNorm params (filter_bias_norm_wd).
    - scale_by_stable_clip: the per-tensor update clipping above, over direction and decay alike
      (optimi divides the tensor's learning rate, which scales both).
    - scale_by_learning_rate(schedule).
    Use it without global-norm clipping (optim.clip_norm: null): update clipping replaces it.
    Defaults are ModernBERT's: betas (0.9, 0.98), eps 1e-6, decay 1e-5.
    """
    name: str = "stable_adamw"
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-6
    decoupled_weight_decay: float = 1e-5  # per step at the peak lr, independent of the lr's size
    mu_dtype: Optional[str] = None  # as AdamW's
    # The old name of decoupled_weight_decay (same meaning), from when every optimizer shared AdamW's
    # keys: still taken, with a DeprecationWarning, as a keyword here and as a recipe key.
    weight_decay: dataclasses.InitVar[Optional[float]] = None

    RENAMED: ClassVar[dict] = {"weight_decay": "decoupled_weight_decay"}

    def __post_init__(self, weight_decay):
        if weight_decay is not None:
            warnings.warn("StableAdamWSection(weight_decay=...) is now decoupled_weight_decay (same meaning); the "
                          "old name goes in a later release", DeprecationWarning, stacklevel=3)
            self.decoupled_weight_decay = weight_decay

    def check(self, prefix: str = "optim.") -> None:
        super().check(prefix)
        _check_adam_like(self, prefix, "decoupled_weight_decay")

    def transform(self, schedule):
        inner = optax.chain(optax.scale_by_adam(b1=self.b1, b2=self.b2, eps=self.eps,
                                                mu_dtype=_moment_dtype(self.mu_dtype)),
                            optax.add_decayed_weights(self.decoupled_weight_decay / self.learning_rate,
                                                      mask=decay_mask))
        return optax.chain(scale_by_stable_clip(inner, self.b2, self.eps), optax.scale_by_learning_rate(schedule))


@dataclasses.dataclass
class LionSection(OptimSection):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): optax.lion, the sign of
    an interpolated momentum; its usual learning rate is 3-10x below AdamW's and its decay as much above."""
    name: str = "lion"
    b1: float = 0.9  # interpolation of momentum and gradient for the update's sign
    b2: float = 0.99  # momentum decay
    weight_decay: float = 1e-3  # decoupled, scaled by the learning rate at each step
    mu_dtype: Optional[str] = None  # dtype of the momentum, as AdamW's first moment

    def check(self, prefix: str = "optim.") -> None:
        super().check(prefix)
        check_choice(f"{prefix}mu_dtype", self.mu_dtype, MOMENT_DTYPES)
        check_ranges(prefix, {"b1": (self.b1, *UNIT_OPEN), "b2": (self.b2, *UNIT_OPEN),
                              "weight_decay": (self.weight_decay, *NON_NEGATIVE)})

    def transform(self, schedule):
        return optax.lion(schedule, b1=self.b1, b2=self.b2, weight_decay=self.weight_decay, mask=decay_mask,
                          mu_dtype=_moment_dtype(self.mu_dtype))


# optim.name -> its section (keys, defaults, checks, and the optax transformation it builds).
OPTIMIZERS: dict[str, type[OptimSection]] = {
    "adamw": AdamWSection,
    "lamb": LambSection,
    "stable_adamw": StableAdamWSection,
    "lion": LionSection,
}


def make_optimizer(o: OptimSection, total_steps: int):
    """Returns (optax transformation, schedule). Updates are applied with
    optax.apply_updates; ``update`` takes ``grad_norm=`` (see clip_by_global_norm)."""
    schedule = make_schedule(o, total_steps)
    parts = [clip_by_global_norm(o.clip_norm)] if o.clip_norm else []
    return optax.chain(*parts, o.transform(schedule)), schedule
