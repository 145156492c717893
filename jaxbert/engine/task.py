"""What the engine's loop asks of a task: the protocol every objective implements.

MLM pretraining (jaxbert.train.loop.MlmTask) and fine-tuning (jaxbert.finetune.loop.FinetuneTask,
which delegates what differs by kind to the registered kind modules) are the two users. The
loop (jaxbert.engine.loop.run) knows none of them by name; jaxbert.engine.session sets up the run
around it (restore or initialise, checkpoints, metrics writer, the RNG keys).
"""

from __future__ import annotations

from typing import Iterator, Protocol

from jaxbert.engine.step import StepSpec


class Task(Protocol):
    step: StepSpec  # the objective: forward pass, loss and metric sums, denominators
    apply_fn: object  # the model's apply, for the eval step
    total: int  # the step the run ends at
    log_every: int

    def batches(self, start: int) -> Iterator[tuple[dict, object]]:
        """(this process's share [A, B_host, ...] of each step's batch, the loader state after it) from step
        start + 1 on; the loader state goes into that step's checkpoint."""

    def summarize(self, sums: dict, prefix: str = "") -> dict:
        """Host side: metric sums (norms and learning rate passed through) -> figures."""

    def throughput(self):
        """(tokens per step, sequence length, training FLOPs per token, peak FLOP/s or None), or None
        where a step has no fixed size (buckets)."""

    def stepped(self, step: int) -> None:
        """Called after every step is dispatched (a progress bar)."""

    def logged(self, step: int, scalars: dict) -> None:
        """The figures of a log step, before they are written (the task may add to them and print)."""

    def eval_due(self, step: int) -> bool:
        """Evaluate after this step (the loop also evaluates after the last one)."""

    def evaluate(self, state) -> dict:
        """Held-out figures (flat scalars, written to metrics.jsonl) of the state's params."""

    def evaluated(self, step: int, state, figures: dict, seconds: float) -> None:
        """After an evaluation: report it, keep the best model."""

    def checkpoint_meta(self, step: int, loader_state) -> dict:
        """What a checkpoint at this step records beside the arrays (jaxbert.workdir.checkpoint_meta)."""

    # Optional: ``close()``, what the task holds (a progress bar) released when the run ends; the
    # session (jaxbert.engine.session.Session.train) calls it before closing the checkpoints.
    # ``train_step``: a pure step (state, batch, rng) -> (state, metrics) the loop compiles in place of
    # make_train_step(step), for an objective the StepSpec does not describe (the embedding kind's GradCache).
