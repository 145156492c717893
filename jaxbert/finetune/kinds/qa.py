"""Extractive question answering: SQuAD v1.1 / v2.0 JSON, an answer span in the context.

Read by squad.read_squad (v1.1 refuses an eval question without an answer), featurized by
qa_features.qa_features (overlapping context windows, questions cut to max_query_length),
trained with the mean of the start and end positions' cross-entropy, decoded by
qa_features.postprocess_qa (the best span over a question's windows; v2.0 may answer ""),
scored by SQuAD's exact match and F1 (squad_v2 for v2.0; F1 picks the best checkpoint), saved
as ...ForQuestionAnswering. Trains with the finetune-squad recipe by default.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp

from jaxbert.engine.step import cross_entropy
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.qa_features import postprocess_qa, qa_features
from jaxbert.finetune.squad import check_answered, gold_answers, read_squad


class QA(Kind):
    name = "qa"
    head = "ForQuestionAnswering"
    recipe = "finetune-squad"
    main_metric = "f1"

    def read(self, path, labels=None, *, labelled=True, version_2=True, text_columns=("sentence",),
             label_column="label", columns=None, values=None):
        examples = read_squad(path)
        if labelled and not version_2:
            check_answered(path, examples)
        return examples, None

    def featurize(self, examples, tok, max_length, stride=128, max_query_length=64):
        return qa_features(examples, tok, max_length, stride, max_query_length)

    def truncation(self, max_length: int) -> str:
        return "questions cut to data.max_query_length"

    def sums(self, out, batch: dict) -> dict:
        w = self.weights(batch)
        start = cross_entropy(out.start_logits.astype(jnp.float32), batch["start_positions"])
        end = cross_entropy(out.end_logits.astype(jnp.float32), batch["end_positions"])
        return {"loss_sum": jnp.sum((start + end) / 2 * w), "weight": jnp.sum(w)}

    def outputs(self, out) -> dict:
        return {"start_logits": out.start_logits.astype(jnp.float32), "end_logits": out.end_logits.astype(jnp.float32)}

    def metrics(self, version_2: bool = False) -> tuple[tuple[str, ...], str]:
        return ("squad_v2",) if version_2 else ("squad",), self.main_metric

    def decode(self, outputs, features, windows=None, labels=None, n_best=20, max_answer_length=30,
               version_2=False) -> dict:
        """Question id -> answer text."""
        answers = postprocess_qa(outputs["start_logits"], outputs["end_logits"], windows, n_best,
                                 max_answer_length, version_2)
        return {"predictions": answers, "scores": None}

    def references(self, examples: list, labels: Sequence[str] | None = None):
        return gold_answers(examples)

    def inputs(self, example, columns: dict) -> dict:
        return {"question": example.question, "context": example.context}

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"answer": decoded["predictions"][example.id]}


KIND = QA()
