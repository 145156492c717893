"""EuroBERT (Boizard et al. 2025; transformers 5's EuroBert classes) as a jaxbert family: its config, its four
classes (heads.py on modules.py), and the key table the converter dispatches to (table.py), used as ModernBERT's
are (jaxbert.model.modernbert). The rest of jaxbert reaches them through its family entry (family.py).
"""

from __future__ import annotations

from jaxbert.model.eurobert.config import CLASS_NAMES, MODEL_TYPE, EuroBertConfig
from jaxbert.model.eurobert.family import attended_positions, build, infer_class, non_embedding_params
from jaxbert.model.lazy import lazy_names

__getattr__ = lazy_names(__name__)  # its model code's names, imported when first asked for (no jax until then)


__all__ = ["CLASS_NAMES", "MODEL_CLASSES", "MODEL_TYPE", "EuroBertConfig", "Table", "attended_positions", "build", "dummy_inputs",
           "infer_class", "is_scanned", "non_embedding_params", "param_count"]
