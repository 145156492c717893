"""0.3.0 removed the 0.1.0 module keywords (dtype=, param_dtype=, scan_layers=, ...) that 0.2.0 deprecated:
a module takes its run-time options as one ModelOptions, and an old keyword is refused by the dataclass."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import jaxbert
from jaxbert import BertConfig, ModelOptions

CFG = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)


@pytest.mark.parametrize("keyword", ["dtype", "param_dtype", "scan_layers", "remat_policy", "attention_impl",
                                     "attention_chunks", "ffn_chunks", "dropout_impl", "decode"])
def test_old_module_keywords_are_refused(keyword):
    with pytest.raises(TypeError, match=keyword):
        jaxbert.BertModel(CFG, **{keyword: jnp.bfloat16})


def test_model_options_is_the_one_spelling():
    model = jaxbert.BertForMaskedLM(CFG, ModelOptions(dtype="bfloat16", scan_layers=True))
    assert model.options.dtype == jnp.bfloat16 and model.options.scan_layers
    assert not hasattr(model, "param_dtype")


def test_moved_class_aliases_are_gone_from_heads():
    import jaxbert.model.bert.heads as heads

    with pytest.raises(AttributeError):
        heads.XLMRobertaForMaskedLM  # noqa: B018  (jaxbert.XLMRobertaForMaskedLM is the name)
    assert jaxbert.XLMRobertaForMaskedLM.__name__ == "XLMRobertaForMaskedLM"
