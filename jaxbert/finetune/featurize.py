"""One entry point from a task kind's examples to its features."""

from __future__ import annotations

from tokenizers import Tokenizer

from jaxbert.finetune.features import Features, choice_features, text_features, token_features
from jaxbert.finetune.qa_features import QAWindows, qa_features
from jaxbert.finetune.tables import TaskDataError


def make_features(kind: str, examples, tok: Tokenizer, max_length: int, stride: int = 128,
                  max_query_length: int = 64) -> tuple[Features, QAWindows | None]:
    """(features, windows) for classification / regression / tokens / choice / qa; windows only for qa.

    stride: QA's context windows share `stride` tokens; a token task's long sentences share
    min(stride, half a window).
    """
    if kind == "classification":
        return text_features(examples, tok, max_length), None
    if kind == "regression":
        return text_features(examples, tok, max_length, regression=True), None
    if kind == "tokens":
        return token_features(examples, tok, max_length, stride), None
    if kind == "choice":
        return choice_features(examples, tok, max_length), None
    if kind == "qa":
        return qa_features(examples, tok, max_length, stride, max_query_length)
    raise TaskDataError(f"unknown task kind {kind!r}")
