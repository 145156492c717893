"""Deprecated: QA's windows and decoding live with the qa kind now, in jaxbert.finetune.kinds.qa.features."""

import warnings

from jaxbert.finetune.kinds.qa.features import QAWindows, postprocess_qa, qa_features

warnings.warn("jaxbert.finetune.qa_features moved to jaxbert.finetune.kinds.qa.features", DeprecationWarning,
              stacklevel=2)

__all__ = ["QAWindows", "postprocess_qa", "qa_features"]
