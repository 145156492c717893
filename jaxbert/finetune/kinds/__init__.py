"""The registry of fine-tuning task kinds: name -> Kind (jaxbert.finetune.kinds.base).

One module per kind holds everything that differs by kind: its reader, features, decoding,
metric and typed options; the rest of the package resolves a name here once, at its edge
(`get(name)`: the command line, a recipe, a saved model's record), and passes the Kind object
on. Adding a kind is one new module defining its Kind object and one line below.
"""

from __future__ import annotations

from jaxbert.finetune.kinds import choice, classification, embedding, qa, regression, tokens
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.row_files import TaskDataError

KINDS: dict[str, Kind] = {
    "classification": classification.KIND,
    "regression": regression.KIND,
    "tokens": tokens.KIND,
    "qa": qa.KIND,
    "choice": choice.KIND,
    "embedding": embedding.KIND,
}


def get(name: str) -> Kind:
    """The registered kind NAME; TaskDataError naming the known ones if there is none."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise TaskDataError(f"unknown task kind {name!r}; known: {', '.join(KINDS)}") from None


def resolve(kind: Kind | str) -> Kind:
    """A Kind as it is; a name as the registered Kind (`get`): for callers that still pass names."""
    return kind if isinstance(kind, Kind) else get(kind)


def recognising(config) -> list[Kind]:
    """The registered kinds whose head and problem_type a fine-tuned model's config matches exactly."""
    return [kind for kind in KINDS.values() if kind.recognises(config)]


__all__ = ["KINDS", "Kind", "get", "resolve", "recognising"]
