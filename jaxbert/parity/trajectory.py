"""Training trajectories: N optimizer steps of jaxbert's real train_step and optimizer
against transformers + torch.optim.AdamW from the same weights on the same batches.

Each step reports the loss on both sides, the gradient norm before clipping, and
the largest parameter difference after the update (per tensor, relative to that
tensor's largest magnitude; the worst tensor is named).

A float32 trajectory is judged against the float64 truth, as ``compare(reference="float64")``
judges a forward pass: AdamW's first updates are about lr * sign(gradient) whatever the
gradient's size, so where a true gradient is near 0 float32 noise on either side moves a
parameter by its whole update, and a float32-to-float32 bound fails correct code. Per tensor,
jaxbert float32's rms distance from transformers float64 may exceed its own float32 rounding
on the same steps (jaxbert float32 against jaxbert float64) by at most RATIO_LIMIT.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.convert import params_to_state_dict
from jaxbert.errors import InputError
from jaxbert.fs import atomic_write_text
from jaxbert.model.families import family_of
from jaxbert.model.classes import build_model, dummy_inputs
from jaxbert.model.options import ModelOptions
from jaxbert.parity.compare import numerics, torch_model
from jaxbert.parity.grad import fixed_masking, float64_reference
from jaxbert.parity.report import RATIO_LIMIT, environment
from jaxbert.parity.torch_reference import torch_trajectory
from jaxbert.engine.optim import make_optimizer
from jaxbert.engine.step import TrainState
from jaxbert.train.mlm import train_step

# (loss relative, parameter relative) per dtype. A float32 trajectory's loss is judged against the
# float64 truth's and its parameters by the excess over its own rounding (RATIO_LIMIT) instead:
# its parameter figure is the same-dtype comparison, shown but not judged.
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
    # float32 trajectories, against the float64 truth (transformers + torch.optim.AdamW in float64):
    loss_truth: float | None = None
    grad_norm_truth: float | None = None
    truth_rel: float | None = None  # worst over tensors of max |p_jax - p_truth| / max |p_truth|
    torch_truth_rel: float | None = None  # the same for torch float32 (information)
    excess: float | None = None  # worst over tensors of rms |p_jax - p_truth| / rms |p_jax - p_jax float64|
    excess_param: str | None = None

    @property
    def loss_rel(self) -> float:
        return abs(self.loss_jax - self.loss_torch) / max(abs(self.loss_torch), 1e-30)

    @property
    def loss_truth_rel(self) -> float | None:
        if self.loss_truth is None:
            return None
        return abs(self.loss_jax - self.loss_truth) / max(abs(self.loss_truth), 1e-30)

    @property
    def ok(self) -> bool:
        if self.excess is not None:  # judged against the float64 truth
            return bool(self.loss_truth_rel <= self.tolerance[0] and self.excess <= RATIO_LIMIT)
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

    @property
    def has_truth(self) -> bool:
        return any(r.excess is not None for r in self.rows)

    def table(self) -> str:
        tol = TRAJECTORY_TOLERANCE[self.dtype]
        if self.has_truth:
            return self._truth_table(tol)
        lines = self._header() + [
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

    def _header(self) -> list:
        e, o = self.env, self.optim
        return [", ".join(f"{k} {e[k]}" for k in ("jax", "flax", "torch", "transformers") if e.get(k)),
                f"device {e['device']}; dtype {self.dtype}; matmul precision {e['precision']}; "
                f"reference {e['reference']}",
                f"AdamW lr {o['learning_rate']:g} (warmup {o['warmup_steps']}, linear decay to "
                f"{o['end_lr_factor']:g}x), betas ({o['b1']}, {o['b2']}), eps {o['eps']:g}, weight decay "
                f"{o['weight_decay']:g} (not on biases / LayerNorm), clip {o['clip_norm']}"]

    def _truth_table(self, tol) -> str:
        """A float32 trajectory judged against the float64 truth."""
        lines = self._header() + [
            f"{'step':>4}{'lr':>11}{'loss jaxbert':>17}{'loss fp64':>17}{'loss rel':>10}{'|g| jaxbert':>13}"
            f"{'|g| torch':>13}{'|g| fp64':>13}{'jax-fp32':>10}{'jax-fp64':>10}{'torch-fp64':>11}{'excess':>8}"
            "  worst param"]
        for r in self.rows:
            lines.append(f"{r.step:4d}{r.lr:11.3e}{r.loss_jax:17.10f}{r.loss_truth:17.10f}{r.loss_truth_rel:10.2e}"
                         f"{r.grad_norm_jax:13.6e}{r.grad_norm_torch:13.6e}{r.grad_norm_truth:13.6e}"
                         f"{r.param_rel:10.2e}{r.truth_rel:10.2e}{r.torch_truth_rel:11.2e}{_excess(r.excess):>8}  "
                         f"{r.excess_param}{'' if r.ok else '  NO'}")
        lines.append(f"jax-fp32 = worst max |jaxbert - torch| (both float32), jax-fp64 / torch-fp64 = the same "
                     f"against transformers + torch.optim.AdamW in float64, each relative to its tensor's largest "
                     f"value; excess = worst over tensors of rms |jaxbert float32 - torch float64| / rms |jaxbert "
                     f"float32 - jaxbert float64| (jaxbert's own float32 rounding on the same steps; AdamW turns a "
                     f"near-zero gradient's noise into a whole update, on both sides)")
        lines.append(f"tolerance: loss {tol[0]:.0e} relative to the float64 loss, excess at most {RATIO_LIMIT} "
                     f"(key biases skipped: their true gradient is exactly 0)")
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"kind": "trajectory", "dtype": self.dtype, "ok": self.ok, "env": self.env, "optim": self.optim,
                "rows": [dict(dataclasses.asdict(r), loss_rel=r.loss_rel, loss_truth_rel=r.loss_truth_rel, ok=r.ok)
                         for r in self.rows]}

    def write_json(self, path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2))


def _excess(ratio: float) -> str:
    return f"{ratio:.2f}" if ratio < 1e3 else f"{ratio:.1e}"


def mlm_batches(inputs: dict, vocab_size: int, steps: int, seed: int = 0, pad_id: int | None = None) -> list:
    """One masking per step (fixed_masking with seed + step) of the same inputs [B, L]; no random
    replacement is the pad id (pad_id), whose embedding row transformers never trains.

    Each batch holds both forms: labels [B, L] (-100 = not predicted) for
    transformers, and masked_positions / masked_labels / masked_weights [1, B, M]
    plus the inputs [1, B, L] for jaxbert's train_step (accum axis of 1).
    """
    out = []
    for s in range(steps):
        masked, labels, _ = fixed_masking(inputs, vocab_size, seed + s, pad_id=pad_id)
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
    Both sides compute in ``dtype`` (float64 or float32), dropout off. A float32 trajectory also runs
    both sides in float64: the torch one is the truth its rows are judged against, jaxbert's gives
    the rounding budget (StepRow.excess).
    """

    if dtype not in TRAJECTORY_TOLERANCE:
        raise InputError(f"--train-steps runs float64 or float32, not {dtype}")
    mlm, p = mlm_model(module, params, seed)
    name = type(mlm).__name__
    batches = mlm_batches(inputs, mlm.config.vocab_size, steps, seed, pad_id=mlm.config.pad_token_id)
    theirs = _torch_steps(mlm, p, batches, optim, steps, dtype)  # one step per next()
    ours = _jax_steps(mlm, p, batches, optim, steps, dtype, precision, seed)
    # float32: judged against the float64 truth, jaxbert's own float64 run giving its rounding budget
    judged_by_truth = dtype == "float32"
    truth, own64 = itertools.repeat(None), itertools.repeat((None, None, None))
    if judged_by_truth:
        truth = _torch_steps(mlm, p, batches, optim, steps, "float64")
        own64 = _jax_steps(mlm, p, batches, optim, steps, "float64", precision, seed)

    rows = []
    for s, (t, (lr, m, mine), true, (_, _, mine64)) in enumerate(zip(theirs, ours, truth, own64)):
        rel, worst = _worst_param(mine, t["params"])
        row = StepRow(s + 1, lr, float(m["mlm_loss_sum"]) / float(m["mlm_weight"]), t["loss"],
                      float(m["grad_norm"]), t["grad_norm"], rel, worst, TRAJECTORY_TOLERANCE[dtype])
        if judged_by_truth:
            row.loss_truth, row.grad_norm_truth = true["loss"], true["grad_norm"]
            row.truth_rel = _worst_param(mine, true["params"])[0]
            row.torch_truth_rel = _worst_param({k: t["params"][k].numpy() for k in mine}, true["params"])[0]
            row.excess, row.excess_param = _worst_excess(mine, mine64, true["params"])
        rows.append(row)
    reference_name = mlm.config.class_name(name)  # a RoBERTa config: RobertaForMaskedLM
    reference = f"transformers {reference_name} + torch.optim.AdamW, {dtype}"
    if judged_by_truth:
        reference += ", float64 as the truth"
    env = environment(dtype, precision, reference)
    return TrajectoryReport(dtype, rows, env, dataclasses.asdict(optim))


def _torch_steps(mlm, p, batches, optim, steps: int, dtype: str):
    """transformers' masked LM holding p, trained by the PyTorch reference in dtype (torch_trajectory)."""
    reference = torch_model(mlm, p, dtype=dtype)
    if dtype == "float64":  # RoPE's tables (ModernBERT, EuroBERT) and EuroBERT's norms in float64 too
        reference = float64_reference(reference)
    return torch_trajectory(reference, batches, optim, steps)


def _jax_steps(mlm, p, batches, optim, steps: int, dtype: str, precision: str, seed: int):
    """jaxbert's train_step + make_optimizer(optim) in dtype: per step (lr, metrics, the params after the
    update as a transformers state dict). The numerics are entered step by step, not across a yield, so
    that a float32 and a float64 run can go side by side."""
    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    name = type(mlm).__name__
    with numerics(dtype, precision):
        runner = mlm.clone(options=mlm.options.replace(dtype=jdtype, param_dtype=jdtype))
        tx, schedule = make_optimizer(optim, steps)
        state = TrainState.create(runner.apply, jax.tree_util.tree_map(lambda x: jnp.asarray(x, jdtype), p),
                                  tx, schedule)
        step_fn = jax.jit(train_step)
        rng = jax.random.key(seed)
    for s, b in enumerate(batches):
        with numerics(dtype, precision):
            lr = float(schedule(s))
            jb = {k: jnp.asarray(v) for k, v in b.items() if k != "labels"}
            state, m = step_fn(state, jb, rng)
            m = jax.device_get(m)
            params = params_to_state_dict(jax.device_get(state.params), mlm.config, name)
        yield lr, m, params


# The key bias adds the same amount to every score of a softmax row: its true
# gradient is exactly zero, both sides return rounding noise for it, and Adam
# scales that noise up to steps of size lr. It changes no output; skip it.
_NO_GRADIENT = ("attention.self.key.bias",)


def _worst_excess(ours: dict, own64: dict, truth: dict) -> tuple:
    """(ratio, key) of the tensor whose rms distance from the float64 truth exceeds its own float32
    rounding (jaxbert float32 against jaxbert float64, the same steps) the most. About 1 when the
    implementation is right, however far AdamW carried the rounding; more by what it adds."""
    worst = (-1.0, "")
    for key, a in ours.items():
        if key.endswith(_NO_GRADIENT):
            continue
        a = np.asarray(a, np.float64)
        distance = float(np.sqrt(np.mean((a - truth[key].numpy().astype(np.float64)) ** 2)))
        budget = float(np.sqrt(np.mean((a - np.asarray(own64[key], np.float64)) ** 2)))
        ratio = 1.0 if distance == 0.0 else (distance / budget if budget > 0.0 else float("inf"))
        if ratio > worst[0]:
            worst = (ratio, key)
    return worst


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
