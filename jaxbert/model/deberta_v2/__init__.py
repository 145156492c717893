"""DeBERTa-v2 and DeBERTa-v3 (He et al. 2021; transformers' DebertaV2 classes, model_type ``deberta-v2``) as a
jaxbert family: its config, its six classes, and the key table the converter dispatches to.

    config = DebertaV2Config.from_json_file("config.json")
    module = build("DebertaV2ForMaskedLM", config, ModelOptions())
    table = Table(config, "DebertaV2ForMaskedLM")  # state-dict key <-> param path

The rest of jaxbert reaches these through the family registry (jaxbert.model.deberta_v2.family).
"""

from __future__ import annotations

import importlib

from jaxbert.model.deberta_v2.config import CLASS_NAMES, MODEL_TYPE, DebertaV2Config
from jaxbert.model.deberta_v2.family import (
    attended_positions,
    build,
    infer_class,
    non_embedding_params,
)

# Names of its model code, imported when first asked for (the folder's own import loads no jax).
_LAZY = {"MODEL_CLASSES": "heads", "Table": "table", "is_scanned": "table", "param_count": "table"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CLASS_NAMES", "MODEL_CLASSES", "MODEL_TYPE", "DebertaV2Config", "Table", "attended_positions", "build",
           "infer_class", "is_scanned", "non_embedding_params", "param_count"]
