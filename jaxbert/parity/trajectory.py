"""Training trajectories: N optimizer steps of jaxbert's real train_step and optimizer
against transformers + torch.optim.AdamW from the same weights on the same batches.

Each step reports the loss on both sides, the gradient norm before clipping, and
the largest parameter difference after the update (per tensor, relative to that
tensor's largest magnitude; the worst tensor is named).
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.convert import params_to_state_dict
from jaxbert.errors import InputError
from jaxbert.fs import atomic_write_text
from jaxbert.model.families import family_of
from jaxbert.model.heads import build_model, dummy_inputs
from jaxbert.model.options import ModelOptions
from jaxbert.parity.compare import numerics, torch_model
from jaxbert.parity.grad import fixed_masking, float64_rotary
from jaxbert.parity.report import environment
from jaxbert.parity.torch_reference import torch_trajectory
from jaxbert.engine.optim import make_optimizer
from jaxbert.engine.step import TrainState
from jaxbert.train.mlm import train_step

# (loss relative, parameter relative) per dtype.
TRAJECTORY_TOLERANCE = {"float64": (1e-9, 1e-8), "float32": (1e-5, 1e-4)}


@dataclasses.dataclass
class StepRow:
    step: int
    lr: float
    loss_jax: float
    loss_torch: float
    grad_norm_jax: float
    grad_norm_torch: float
    param_rel: float  # worst over tensors of max |p_jax - p_torch| / max |p_torch|
    worst_param: str
    tolerance: tuple

    @property
    def loss_rel(self) -> float:
        return abs(self.loss_jax - self.loss_torch) / max(abs(self.loss_torch), 1e-30)

    @property
    def ok(self) -> bool:
        return bool(self.loss_rel <= self.tolerance[0] and self.param_rel <= self.tolerance[1])


@dataclasses.dataclass
class TrajectoryReport:
    dtype: str
    rows: list
    env: dict
    optim: dict

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def table(self) -> str:
        e, o = self.env, self.optim
        tol = TRAJECTORY_TOLERANCE[self.dtype]
        lines = [", ".join(f"{k} {e[k]}" for k in ("jax", "flax", "torch", "transformers") if e.get(k)),
                 f"device {e['device']}; dtype {self.dtype}; matmul precision {e['precision']}; "
                 f"reference {e['reference']}",
                 f"AdamW lr {o['learning_rate']:g} (warmup {o['warmup_steps']}, linear decay to "
                 f"{o['end_lr_factor']:g}x), betas ({o['b1']}, {o['b2']}), eps {o['eps']:g}, weight decay "
                 f"{o['weight_decay']:g} (not on biases / LayerNorm), clip {o['clip_norm']}",
                 f"{'step':>4}{'lr':>11}{'loss jaxbert':>18}{'loss torch':>18}{'loss rel':>11}"
                 f"{'|g| jaxbert':>13}{'|g| torch':>13}{'param rel':>11}  worst param"]
        for r in self.rows:
            lines.append(f"{r.step:4d}{r.lr:11.3e}{r.loss_jax:18.12f}{r.loss_torch:18.12f}{r.loss_rel:11.2e}"
                         f"{r.grad_norm_jax:13.6e}{r.grad_norm_torch:13.6e}{r.param_rel:11.2e}  "
                         f"{r.worst_param}{'' if r.ok else '  NO'}")
        lines.append(f"tolerance: loss {tol[0]:.0e} relative, every parameter {tol[1]:.0e} relative to its "
                     f"tensor's largest value (key biases skipped: their true gradient is exactly 0)")
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"kind": "trajectory", "dtype": self.dtype, "ok": self.ok, "env": self.env, "optim": self.optim,
                "rows": [dict(dataclasses.asdict(r), loss_rel=r.loss_rel, ok=r.ok) for r in self.rows]}

    def write_json(self, path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2))


def mlm_batches(inputs: dict, vocab_size: int, steps: int, seed: int = 0) -> list:
    """One masking per step (fixed_masking with seed + step) of the same inputs [B, L].

    Each batch holds both forms: labels [B, L] (-100 = not predicted) for
    transformers, and masked_positions / masked_labels / masked_weights [1, B, M]
    plus the inputs [1, B, L] for jaxbert's train_step (accum axis of 1).
    """
    out = []
    for s in range(steps):
        masked, labels, _ = fixed_masking(inputs, vocab_size, seed + s)
        B = labels.shape[0]
        M = int((labels != -100).sum(-1).max())
        pos = np.zeros((B, M), np.int32)
        lab = np.zeros((B, M), np.int32)
        w = np.zeros((B, M), np.float32)
        for i in range(B):
            idx = np.flatnonzero(labels[i] != -100)
            pos[i, :len(idx)], lab[i, :len(idx)], w[i, :len(idx)] = idx, labels[i, idx], 1.0
        b = {k: np.asarray(masked[k], np.int32)[None] for k in ("input_ids", "token_type_ids", "attention_mask")}
        b.update(masked_positions=pos[None], masked_labels=lab[None], masked_weights=w[None],
                 labels=labels.astype(np.int64))
        out.append(b)
    return out


def _no_dropout(config):
    """The config with every dropout rate 0 (BERT's *_dropout_prob, ModernBERT's *_dropout)."""
    rates = {f.name: 0.0 for f in dataclasses.fields(config)
             if f.name.endswith(("dropout", "dropout_prob")) and getattr(config, f.name) is not None}
    return config.replace(**rates)


def mlm_model(module, params, seed: int = 0):
    """(the family's masked-LM module with dropout off, its params): the encoder of ``module``'s
    params, an MLM head from ``module`` when it has one, else a fresh one (init with ``seed``).

    Every family trains its masked-LM class (BertForMaskedLM, RobertaForMaskedLM,
    ModernBertForMaskedLM); what the masked LM lacks of ``module`` (a pooler, an NSP head) is left out."""
    family = family_of(module.config)
    cfg = _no_dropout(module.config)
    name = family.mlm_class(cfg.model_type)
    mlm = build_model(name, cfg, ModelOptions(scan_layers=module.options.scan_layers))
    if type(module).__name__ == name:
        return mlm, params
    fresh = mlm.init(jax.random.key(seed), *dummy_inputs(name, 1, 8))["params"]
    encoder = params.get(family.prefix, params)
    out = {family.prefix: {k: v for k, v in encoder.items() if k in fresh[family.prefix]}}
    for key, head in fresh.items():  # the MLM head: module's own when it has all of it (BertForPreTraining's)
        if key != family.prefix:
            own = params.get(key) if isinstance(params.get(key), dict) else {}
            out[key] = {k: own[k] for k in head} if set(head) <= set(own) else head
    return mlm, out


def trajectory(module, params, inputs: dict, optim, steps: int, *, dtype: str = "float64",
               precision: str = "highest", seed: int = 0) -> TrajectoryReport:
    """``steps`` updates of jaxbert's train_step + make_optimizer(optim) against
    transformers' masked-LM class (BertForMaskedLM, ModernBertForMaskedLM) + torch.optim.AdamW, from the
    same weights.

    ``module``/``params`` give the encoder (any jaxbert class; see mlm_model);
    ``inputs`` int arrays [B, L] are masked afresh for each step (mlm_batches).
    Both sides compute in ``dtype`` (float64 or float32), dropout off.
    """

    if dtype not in TRAJECTORY_TOLERANCE:
        raise InputError(f"--train-steps runs float64 or float32, not {dtype}")
    mlm, p = mlm_model(module, params, seed)
    name = type(mlm).__name__
    batches = mlm_batches(inputs, mlm.config.vocab_size, steps, seed)

    reference = torch_model(mlm, p, dtype=dtype)
    if dtype == "float64":  # RoPE's tables in float64 too (ModernBERT); a model without rotary is unchanged
        reference = float64_rotary(reference)
    theirs = torch_trajectory(reference, batches, optim, steps)  # one step per next()

    rows = []
    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    with numerics(dtype, precision):
        runner = mlm.clone(options=mlm.options.replace(dtype=jdtype, param_dtype=jdtype))
        tx, schedule = make_optimizer(optim, steps)
        state = TrainState.create(runner.apply, jax.tree_util.tree_map(lambda x: jnp.asarray(x, jdtype), p),
                                  tx, schedule)
        step_fn = jax.jit(train_step)
        rng = jax.random.key(seed)
        for s, (b, t) in enumerate(zip(batches, theirs)):
            lr = float(schedule(s))
            jb = {k: jnp.asarray(v) for k, v in b.items() if k != "labels"}
            state, m = step_fn(state, jb, rng)
            m = jax.device_get(m)
            ours = params_to_state_dict(jax.device_get(state.params), mlm.config, name)
            rel, worst = _worst_param(ours, t["params"])
            rows.append(StepRow(s + 1, lr, float(m["mlm_loss_sum"]) / float(m["mlm_weight"]), t["loss"],
                                float(m["grad_norm"]), t["grad_norm"], rel, worst,
                                TRAJECTORY_TOLERANCE[dtype]))
    reference_name = mlm.config.class_name(name)  # a RoBERTa config: RobertaForMaskedLM
    env = environment(dtype, precision, f"transformers {reference_name} + torch.optim.AdamW, {dtype}")
    return TrajectoryReport(dtype, rows, env, dataclasses.asdict(optim))


# The key bias adds the same amount to every score of a softmax row: its true
# gradient is exactly zero, both sides return rounding noise for it, and Adam
# scales that noise up to steps of size lr. It changes no output; skip it.
_NO_GRADIENT = ("attention.self.key.bias",)


def _worst_param(ours: dict, theirs: dict) -> tuple:
    worst = (-1.0, "")
    for key, a in ours.items():
        if key.endswith(_NO_GRADIENT):
            continue
        if key not in theirs:
            raise RuntimeError(f"transformers has no parameter {key}")
        t = theirs[key].numpy().astype(np.float64)
        rel = float(np.abs(np.asarray(a, np.float64) - t).max() / max(float(np.abs(t).max()), 1e-30))
        if rel > worst[0]:
            worst = (rel, key)
    return worst
