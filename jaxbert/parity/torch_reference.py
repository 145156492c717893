"""The PyTorch side of a training trajectory: transformers' model, torch.optim.AdamW,
clip_grad_norm_-style clipping and a warmup + linear decay schedule, written from
PyTorch's own pieces (no jaxbert optimizer code), with every point where optax and
torch differ matched explicitly:

- epsilon: both add eps outside the square root of the bias-corrected second
  moment (optax.adamw eps_root=0; torch.optim.AdamW eps): nothing to change.
- bias correction: both divide the moments by 1 - beta**t with t counted from 1.
- decoupled decay: optax adds weight_decay * p to the Adam direction before the
  learning rate scales it; torch multiplies p by (1 - lr * weight_decay) first.
  The same update, p - lr * (adam + wd * p), rounded in a different order.
- decay mask: jaxbert decays every leaf but biases and LayerNorm scales; here the
  parameters named *.bias or *LayerNorm* go to a param group with weight_decay 0.
- schedule: optax evaluates the schedule at the count of updates done *before*
  the update (0 on the first), so the first step of a warmup runs at lr 0;
  the lr is set here for each step from the same formula.
- clipping: torch.nn.utils.clip_grad_norm_ scales by max_norm / (norm + 1e-6);
  optax.clip_by_global_norm by max_norm / norm, and only when norm >= max_norm.
  The reference takes the norm with get_total_norm and clips with
  clip_grads_with_norm_ given max_norm * (norm + 1e-6) / norm, which makes
  torch's factor max_norm / norm (a relative 1e-6 / norm otherwise, far above
  float64 rounding).
"""

from __future__ import annotations

import numpy as np


def warmup_linear(step: int, peak: float, warmup: int, total: int, end_factor: float = 0.0) -> float:
    """Learning rate of update ``step`` (0-based): linear 0 -> peak over ``warmup``
    updates, then linear to peak * end_factor at ``total``."""
    if step < warmup:
        return peak * step / warmup
    rest = max(total - warmup, 1)
    frac = min(step - warmup, rest) / rest
    return peak + (peak * end_factor - peak) * frac


def _no_decay(name: str) -> bool:
    return name.endswith("bias") or "LayerNorm" in name


def torch_trajectory(model, batches, optim, total_steps: int):
    """Train ``model`` (a transformers BertForMaskedLM, dropout off) on ``batches``.

    Args:
      batches: dicts of NumPy input_ids, token_type_ids, attention_mask ([B, L] or
        [1, B, L]) and labels [B, L] (-100 where not predicted).
      optim: a jaxbert OptimSection (name adamw, schedule linear).
    Yields per step a dict: loss, grad_norm (before clipping), lr, and
    params {state-dict key: tensor} after the update (live: read them before
    the next step).
    """
    import torch

    named = list(model.named_parameters())  # tied tensors appear once
    groups = [{"params": [p for n, p in named if not _no_decay(n)], "weight_decay": optim.weight_decay},
              {"params": [p for n, p in named if _no_decay(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=optim.learning_rate, betas=(optim.b1, optim.b2), eps=optim.eps,
                            weight_decay=optim.weight_decay, foreach=False)
    params = [p for _, p in named]
    warmup = min(optim.warmup_steps, total_steps)
    model.train()  # the config's dropout rates are 0: train mode changes nothing else in BERT
    for step, b in enumerate(batches):
        lr = warmup_linear(step, optim.learning_rate, warmup, total_steps, optim.end_lr_factor)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        shape = b["labels"].shape  # [B, L]; the inputs may carry an accum axis of 1
        kw = {k: torch.from_numpy(np.asarray(b[k]).reshape(shape)).long()
              for k in ("input_ids", "token_type_ids", "attention_mask", "labels")}
        loss = model(**kw).loss  # mean cross-entropy over labels != -100
        loss.backward()
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if optim.clip_norm:
            n = float(norm)
            torch.nn.utils.clip_grads_with_norm_(params, optim.clip_norm * (n + 1e-6) / n, norm)
        opt.step()
        yield {"loss": float(loss.detach()), "grad_norm": float(norm), "lr": lr,
               "params": {k: p.detach() for k, p in named}}
