"""Multiple choice: a context and C candidate endings, the index of the right one.

Read by readers.read_choice (SWAG CSV or JSONL), featurized by features.choice_features
([N, C, L] (context, ending) pairs), trained with cross-entropy over the C endings' scores,
scored by accuracy, saved as ...ForMultipleChoice (id2label keeps transformers' default two
entries; the head scores each ending).
"""

from __future__ import annotations

from typing import Sequence

from jaxbert.finetune.features import choice_features
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.readers import read_choice


class Choice(Kind):
    name = "choice"
    head = "ForMultipleChoice"
    metric_names = ("accuracy",)
    main_metric = "accuracy"

    def read_file(self, path, labels, labelled, table):
        return read_choice(path, labelled=labelled)

    def make_features(self, examples, tok, max_length, options):
        return choice_features(examples, tok, max_length), None

    def inputs(self, example, columns: dict) -> dict:
        return {"context": example.context, "endings": list(example.endings)}

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"label": int(decoded["predictions"][i]), "score": float(decoded["scores"][i])}


KIND = Choice()
