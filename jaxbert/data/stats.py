"""What one corpus input contributed, and the corpus error."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from jaxbert.errors import InputError


class CorpusError(InputError):
    """An input is missing, unreadable or has no documents."""


@dataclass
class SourceStats:
    """What one input file (or the embedded corpus) contributed."""
    path: str
    kind: str
    bytes: int = 0
    documents: int = 0
    replaced: int = 0  # invalid UTF-8 sequences replaced with U+FFFD
    skipped: str = ""  # why the file gave nothing, e.g. "empty"

    def as_dict(self) -> dict:
        return asdict(self)
