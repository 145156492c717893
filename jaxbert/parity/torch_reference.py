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
  parameters named *.bias, or the weight of a module named *LayerNorm or *norm (BERT's
  LayerNorm, ModernBERT's norm, attn_norm, mlp_norm, final_norm), go to a param group
  with weight_decay 0.
- schedule: optax evaluates the schedule at the count of updates done *before*
  the update (0 on the first), so the first step of a warmup runs at lr 0;
  the lr is set here for each step from the same formula.
- loss: the mean cross-entropy over the labelled positions, taken here from the model's
  logits in their own dtype (BertForMaskedLM's loss is that; ModernBertForMaskedLM's
  casts the logits to float32 first, which a float64 trajectory would see).
- clipping: torch.nn.utils.clip_grad_norm_ scales by max_norm / (norm + 1e-6);
  optax.clip_by_global_norm by max_norm / norm, and only when norm >= max_norm.
  The reference takes the norm with get_total_norm and clips with
  clip_grads_with_norm_ given max_norm * (norm + 1e-6) / norm, which makes
  torch's factor max_norm / norm (a relative 1e-6 / norm otherwise, far above
  float64 rounding).
"""

from __future__ import annotations

import inspect

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
    parts = name.split(".")
    return parts[-1] == "bias" or "LayerNorm" in name or (len(parts) > 1 and parts[-2].lower().endswith("norm"))


def torch_trajectory(model, batches, optim, total_steps: int):
    """Train ``model`` (a transformers masked LM: BertForMaskedLM, ModernBertForMaskedLM; dropout off)
    on ``batches``.

    Args:
      batches: dicts of NumPy input_ids, token_type_ids, attention_mask ([B, L] or
        [1, B, L]) and labels [B, L] (-100 where not predicted); token_type_ids go only to a
        model whose forward takes them (ModernBERT's does not).
      optim: a jaxbert OptimSection (name adamw, schedule linear).
    Yields per step a dict: loss, grad_norm (before clipping), lr, and
    params {state-dict key: tensor} after the update (live: read them before
    the next step).
    """
    import torch

    keys = [k for k in ("input_ids", "token_type_ids", "attention_mask", "labels")
            if k in inspect.signature(model.forward).parameters]
    named = list(model.named_parameters())  # tied tensors appear once
    groups = [{"params": [p for n, p in named if not _no_decay(n)], "weight_decay": optim.weight_decay},
              {"params": [p for n, p in named if _no_decay(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=optim.learning_rate, betas=(optim.b1, optim.b2), eps=optim.eps,
                            weight_decay=optim.weight_decay, foreach=False)
    params = [p for _, p in named]
    warmup = min(optim.warmup_steps, total_steps)
    model.train()  # the config's dropout rates are 0: train mode changes nothing else in BERT or ModernBERT
    for step, b in enumerate(batches):
        lr = warmup_linear(step, optim.learning_rate, warmup, total_steps, optim.end_lr_factor)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        shape = b["labels"].shape  # [B, L]; the inputs may carry an accum axis of 1
        kw = {k: torch.from_numpy(np.asarray(b[k]).reshape(shape)).long()
              for k in keys}
        labels = kw.pop("labels")
        logits = model(**kw).logits
        # mean cross-entropy over labels != -100 in the logits' dtype, as BertForMaskedLM takes it
        # (transformers' ModernBERT loss casts the logits to float32: 1e-8 off a float64 run)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)
        loss.backward()
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if optim.clip_norm:
            n = float(norm)
            torch.nn.utils.clip_grads_with_norm_(params, optim.clip_norm * (n + 1e-6) / n, norm)
        opt.step()
        yield {"loss": float(loss.detach()), "grad_norm": float(norm), "lr": lr,
               "params": {k: p.detach() for k, p in named}}
