"""The forwarding modules left at the paths that 0.3.0 moved (jaxbert.model.config -> jaxbert.model.bert.config,
...): importing one warns (DeprecationWarning naming the new path) and its names read through to the new
modules. They are removed in 0.4.0; jaxbert's own code imports the new paths."""

from __future__ import annotations

import importlib
import warnings


def forward(old: str, *new: str):
    """Warns that module ``old`` moved to ``new`` (the modules its names now live in, searched in order) and
    returns the ``__getattr__`` that reads each name from them, afresh at every access."""
    warnings.warn(f"{old} moved to {' and '.join(new)} in jaxbert 0.3.0; the old path is removed in 0.4.0",
                  DeprecationWarning, stacklevel=3)

    def __getattr__(name: str):
        for module in new:
            target = importlib.import_module(module)
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r} (it moved to {' and '.join(new)})")

    return __getattr__
