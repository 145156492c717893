"""What a conversion key table is made of, for every family's table: one row per tensor.

A family's table (BERT's in jaxbert.model.bert.table, ModernBERT's in jaxbert.model.modernbert.table)
yields an ``Entry`` for each tensor of a model class; the converter reads and writes through it.
"""

from __future__ import annotations

import dataclasses

TRANSPOSE = "transpose"  # a Linear weight: [out, in] in the state dict, [in, out] in the params
COPY = "copy"  # the same array on both sides


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor. ``key``: state-dict key; ``path``: param path (scanned paths have no layer
    level); ``transform``: TRANSPOSE or COPY; ``shape``: the Flax shape of one layer's slice;
    ``layer``: its index on the leading axis when scanned, else None."""

    key: str
    path: tuple
    transform: str
    shape: tuple
    layer: int | None = None

    @property
    def torch_shape(self) -> tuple:
        return self.shape[::-1] if self.transform == TRANSPOSE else self.shape
