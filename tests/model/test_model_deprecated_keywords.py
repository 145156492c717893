"""The 0.1.0 keywords (dtype=, param_dtype=, scan_layers=, ...) keep working for a release, with a
DeprecationWarning naming ModelOptions, and compute exactly what the ModelOptions spelling computes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert import BertConfig, ModelOptions

CFG = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
IDS = jnp.asarray(np.random.default_rng(0).integers(1, 60, (2, 7)), jnp.int32)


def _run(model):
    params = model.init(jax.random.PRNGKey(0), IDS, jnp.zeros_like(IDS))
    return params, model.apply(params, IDS, jnp.zeros_like(IDS))


def test_dtype_keyword_warns_and_equals_model_options():
    with pytest.warns(DeprecationWarning, match=r"BertModel\(dtype=\.\.\.\).*ModelOptions\(dtype=\.\.\.\)"):
        old = jaxbert.BertModel(CFG, dtype=jnp.bfloat16)
    new = jaxbert.BertModel(CFG, ModelOptions(dtype="bfloat16"))
    assert old.options == new.options and old.dtype is None
    _, a = _run(old)
    _, b = _run(new)
    assert a.last_hidden_state.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(a.last_hidden_state, np.float32), np.asarray(b.last_hidden_state, np.float32))


def test_clone_with_old_keywords_changes_the_options():
    base = jaxbert.BertForMaskedLM(CFG)
    with pytest.warns(DeprecationWarning, match="scan_layers"):
        scanned = base.clone(scan_layers=True, param_dtype=jnp.bfloat16)
    assert scanned.options.scan_layers and scanned.options.param_dtype == jnp.bfloat16
    params, out = _run(scanned)
    kernel = params["params"]["bert"]["encoder"]["layer"]["attention"]["self"]["query"]["kernel"]
    assert kernel.shape == (2, 16, 16) and kernel.dtype == jnp.bfloat16  # one stacked dict, layer axis first
    assert out.logits.shape == (2, 7, 60)


def test_a_bad_old_keyword_value_is_refused_as_model_options_refuses_it():
    with pytest.raises(ValueError, match="remat_policy 'sometimes' is unknown"):
        with pytest.warns(DeprecationWarning):
            jaxbert.BertModel(CFG, remat_policy="sometimes")
