"""ModernBERT (and the checkpoints that load through its classes: mmBERT, Ettin's encoders) as a
jaxbert family: its config, its six classes, and the key table the converter dispatches to.

    config = ModernBertConfig.from_json_file("config.json")
    module = build("ModernBertForMaskedLM", config, ModelOptions(scan_layers=True))
    table = Table(config, "ModernBertForMaskedLM", scan_layers=True)  # state-dict key <-> param path

The rest of jaxbert reaches these through the family registry (jaxbert.model.modernbert.family).
"""

from __future__ import annotations

from jaxbert.model.modernbert.config import CLASS_NAMES, MODEL_TYPE, ModernBertConfig
from jaxbert.model.modernbert.family import attended_positions, build, infer_class, non_embedding_params
from jaxbert.model.lazy import lazy_names

__getattr__ = lazy_names(__name__)  # its model code's names, imported when first asked for (no jax until then)


__all__ = ["CLASS_NAMES", "MODEL_CLASSES", "MODEL_TYPE", "ModernBertConfig", "Table", "attended_positions", "build", "dummy_inputs",
           "infer_class", "is_scanned", "non_embedding_params", "param_count"]
