"""A fine-tuning kind's objective as the engine's step builder takes it (jaxbert.engine.step).

``step_spec(kind)``: the forward pass over the model inputs, the kind's loss sums
(jaxbert.finetune.losses), and the objective: the mean loss over every weighted target of
the global batch (rows, or labelled tokens for tagging). Evaluation keeps the per-row
outputs that scoring needs (``outputs``).
"""

from __future__ import annotations

import functools

from jaxbert.engine.step import StepSpec
from jaxbert.finetune.losses import MODEL_INPUTS, outputs, task_sums, weights


def _forward(params, apply_fn, batch, rng, deterministic: bool):
    rngs = {} if deterministic else {"dropout": rng}
    return apply_fn({"params": params}, *(batch[k] for k in MODEL_INPUTS), deterministic=deterministic, rngs=rngs)


@functools.cache
def step_spec(kind: str) -> StepSpec:
    return StepSpec(name=kind, forward=_forward,
                    sums=lambda out, batch: task_sums(kind, out, batch),
                    weights=lambda batch: {"loss": weights(kind, batch)},
                    objective=lambda sums, dens, batch: sums["loss_sum"] / dens["loss"],
                    loss_sum=lambda sums: sums["loss_sum"])


def eval_outputs(kind: str):
    """model output -> what evaluation keeps per row (logits, or start / end logits)."""
    return functools.partial(outputs, kind)
