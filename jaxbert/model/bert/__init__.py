"""BERT: its config (config.py), its modules (modules.py: BertModel; encoder.py, attention.py), its heads and
classes (heads.py), its converter key table (table.py) and its family entry (family.py). The families on
BERT's modules (RoBERTa) build on these.

Until 0.3.0 ``jaxbert.model.bert`` was the module of BertModel and BertPreTrainedModel: reading them here
still works, with a DeprecationWarning naming their home, jaxbert.model.bert.modules (removed in 0.4.0).
"""

import importlib
import warnings

_MOVED = ("BertModel", "BertPreTrainedModel")


def __getattr__(name: str):
    if name in _MOVED:
        warnings.warn(f"jaxbert.model.bert.{name} moved to jaxbert.model.bert.modules.{name} in jaxbert 0.3.0; "
                      "the old path is removed in 0.4.0", DeprecationWarning, stacklevel=2)
        value = globals()[name] = getattr(importlib.import_module("jaxbert.model.bert.modules"), name)  # warned once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
