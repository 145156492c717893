"""Extractive question answering: SQuAD v1.1 / v2.0 JSON, an answer span in the context.

The kind is this folder: read by squad.read_squad (v1.1 refuses an eval question without an
answer), featurized by features.qa_features (overlapping context windows, questions cut to
max_query_length), trained with the mean of the start and end positions' cross-entropy,
decoded by features.postprocess_qa (the best span over a question's windows; v2.0 may answer ""),
scored by SQuAD's exact match and F1 (squad_v2 for v2.0; F1 picks the best checkpoint), saved
as ...ForQuestionAnswering. Trains with the finetune-squad recipe by default. Its options
(QAOptions, the recipe's kinds.qa) say how contexts are cut, how answers are decoded and
whether the data is SQuAD v2.0; the exported model's task record keeps them.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp

from jaxbert.engine.recipe import POSITIVE, check_ranges
from jaxbert.engine.step import cross_entropy
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.kinds.qa.features import postprocess_qa, qa_features
from jaxbert.finetune.kinds.qa.squad import check_answered, gold_answers, read_squad


@dataclasses.dataclass(frozen=True)
class QAOptions:
    stride: int = 128  # tokens shared by consecutive windows of a long context
    max_query_length: int = 64  # question tokens kept
    n_best: int = 20  # start / end candidates per window
    max_answer_length: int = 30  # longest answer, in tokens
    version_2: bool = False  # SQuAD v2.0: unanswerable questions, scored with squad_v2

    def check(self, prefix: str = "") -> None:
        check_ranges(prefix, {k: (getattr(self, k), *POSITIVE) for k in (
            "stride", "max_query_length", "n_best", "max_answer_length")})


class QA(Kind):
    name = "qa"
    head = "ForQuestionAnswering"
    recipe = "finetune-squad"
    main_metric = "f1"
    Options = QAOptions

    def read_file(self, path, labels, labelled, table):
        return read_squad(path), None

    def check_scorable(self, path, examples, options) -> None:
        if not options.version_2:
            check_answered(path, examples)

    def make_features(self, examples, tok, max_length, options, labels):
        return qa_features(examples, tok, max_length, options.stride, options.max_query_length)

    def truncation(self, max_length: int) -> str:
        return "questions cut to kinds.qa.max_query_length"

    def sums(self, out, batch: dict) -> dict:
        w = self.weights(batch)
        start = cross_entropy(out.start_logits.astype(jnp.float32), batch["start_positions"])
        end = cross_entropy(out.end_logits.astype(jnp.float32), batch["end_positions"])
        return {"loss_sum": jnp.sum((start + end) / 2 * w), "weight": jnp.sum(w)}

    def outputs(self, out) -> dict:
        return {"start_logits": out.start_logits.astype(jnp.float32), "end_logits": out.end_logits.astype(jnp.float32)}

    def metrics(self, options=None) -> tuple[tuple[str, ...], str]:
        version_2 = options is not None and options.version_2
        return ("squad_v2",) if version_2 else ("squad",), self.main_metric

    def decode_outputs(self, outputs, features, windows, labels, options) -> dict:
        """Question id -> answer text."""
        answers = postprocess_qa(outputs["start_logits"], outputs["end_logits"], windows, options.n_best,
                                 options.max_answer_length, options.version_2)
        return {"predictions": answers, "scores": None}

    def references(self, examples: list, labels: Sequence[str] | None = None):
        return gold_answers(examples)

    def inputs(self, example, columns: dict) -> dict:
        return {"question": example.question, "context": example.context}

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"answer": decoded["predictions"][example.id]}


KIND = QA()
