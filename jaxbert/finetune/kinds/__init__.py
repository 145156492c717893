"""The registry of fine-tuning task kinds: name -> Kind (jaxbert.finetune.kinds.base).

One module per kind holds everything that differs by kind; the rest of the package looks a
kind up here (`get(name)`) and asks it. Adding a kind is one new module defining its Kind
object and one line below.
"""

from __future__ import annotations

from jaxbert.finetune.kinds import choice, classification, qa, regression, tokens
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.tables import TaskDataError

KINDS: dict[str, Kind] = {
    "classification": classification.KIND,
    "regression": regression.KIND,
    "tokens": tokens.KIND,
    "qa": qa.KIND,
    "choice": choice.KIND,
}


def get(name: str) -> Kind:
    """The registered kind NAME; TaskDataError naming the known ones if there is none."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise TaskDataError(f"unknown task kind {name!r}; known: {', '.join(KINDS)}") from None


__all__ = ["KINDS", "Kind", "get"]
