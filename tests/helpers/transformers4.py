"""Marks for the comparisons only transformers 4.x can make.

`@pytest.mark.transformers4(WHY)` on a test (or a `pytest.param`) skips it where transformers >= 5 is
installed, with WHY in the reason (tests/conftest.py). README's test command installs transformers 5;
`.ci/run` runs `pytest -m transformers4` in a second venv with transformers 4.57 and sets
JAXBERT_EXPECT_TRANSFORMERS4=1 there, which turns a skip of a marked test into a failure. Mark only
the part that needs 4.x: a test whose other checks hold on 5.x is split (the question-answering
pipeline checks are tests of their own beside the export checks that run everywhere).
"""

from __future__ import annotations

import pytest

RELATIVE = "relative_key / relative_key_query position embeddings were removed in transformers 5"
FLAX = "transformers' Flax models (FlaxBertForMaskedLM) were removed in transformers 5"
BIN = "transformers 5's save_pretrained writes no pytorch_model.bin (safe_serialization=False was removed)"
QA_PIPELINE = "the question-answering pipeline was removed in transformers 5"


def transformers4(why: str):
    return pytest.mark.transformers4(why)


def positions(*names: str) -> list:
    """position_embedding_type values for parametrize, the relative ones marked transformers4."""
    return [pytest.param(n, marks=transformers4(RELATIVE)) if n.startswith("relative") else n for n in names]
