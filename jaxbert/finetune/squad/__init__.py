"""Deprecated: SQuAD's reader lives with the qa kind now, in jaxbert.finetune.kinds.qa.squad."""

import warnings

from jaxbert.finetune.kinds.qa.squad import QAExample, check_answered, gold_answers, read_squad

warnings.warn("jaxbert.finetune.squad moved to jaxbert.finetune.kinds.qa.squad", DeprecationWarning, stacklevel=2)

__all__ = ["QAExample", "check_answered", "gold_answers", "read_squad"]
