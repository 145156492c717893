"""A fine-tuning kind's objective as the engine's step builder takes it (jaxbert.engine.step).

``step_spec(kind)``: the forward pass over the model inputs, the kind's loss sums and their
weights (its Kind in jaxbert.finetune.kinds), and the objective: the mean loss over every
weighted target of the global batch (rows, or labelled tokens for tagging). Evaluation keeps
the per-row outputs that scoring needs (``eval_outputs``).
"""

from __future__ import annotations

import functools

from jaxbert.engine.step import StepSpec
from jaxbert.finetune import kinds
from jaxbert.finetune.kinds import Kind
from jaxbert.finetune.losses import MODEL_INPUTS


def _forward(params, apply_fn, batch, rng, deterministic: bool):
    rngs = {} if deterministic else {"dropout": rng}
    return apply_fn({"params": params}, *(batch[k] for k in MODEL_INPUTS), deterministic=deterministic, rngs=rngs)


def step_spec(kind: Kind | str) -> StepSpec:
    """The StepSpec of a task kind (one per Kind object, so jitted steps are reused)."""
    return _step_spec(kinds.resolve(kind))


@functools.cache
def _step_spec(k: Kind) -> StepSpec:
    return StepSpec(name=k.name, forward=_forward,
                    sums=k.sums,
                    weights=lambda batch: {"loss": k.weights(batch)},
                    objective=lambda sums, dens, batch: sums["loss_sum"] / dens["loss"],
                    loss_sum=lambda sums: sums["loss_sum"])


def eval_outputs(kind: Kind | str):
    """model output -> what evaluation keeps per row (logits, or start / end logits)."""
    return kinds.resolve(kind).outputs
