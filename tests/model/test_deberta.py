"""DeBERTa-v2's modules beyond parity: the options that change how it computes give the same numbers (queries in
blocks, the scanned stack), MLM logits at masked positions are the full logits there, and a training forward
(dropout on) runs and differs from the eval one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert.model.deberta_v2 import build
from tests.helpers.deberta import padded_ids, saved_model


@pytest.fixture(scope="session")
def deberta_models():
    """saved_model: the session's tiny models, one per class and style."""
    return saved_model


def test_blocks_of_queries_and_the_scanned_stack_give_the_same_logits(deberta_models):
    module, params = jaxbert.from_pretrained(deberta_models("DebertaV2ForMaskedLM", "v3"))
    ids, mask = padded_ids(24, 15, 1)
    whole = module.apply({"params": params}, ids, attention_mask=mask).logits
    chunked = build("DebertaV2ForMaskedLM", module.config, module.options.replace(attention_chunks=4))
    np.testing.assert_allclose(chunked.apply({"params": params}, ids, attention_mask=mask).logits, whole, atol=2e-5)
    scanned, scanned_params = jaxbert.from_pretrained(deberta_models("DebertaV2ForMaskedLM", "v3"), scan_layers=True)
    np.testing.assert_allclose(scanned.apply({"params": scanned_params}, ids, attention_mask=mask).logits, whole,
                               atol=2e-5)
    positions = jnp.asarray([[1, 5], [0, 14]])
    at = module.apply({"params": params}, ids, attention_mask=mask, masked_positions=positions).logits
    np.testing.assert_allclose(at, jnp.take_along_axis(whole, positions[..., None], axis=1), atol=1e-6)


def test_a_training_forward_drops_out_and_has_gradients(deberta_models):
    module, params = jaxbert.from_pretrained(deberta_models("DebertaV2ForSequenceClassification", "v2"))
    ids, mask = padded_ids(24, 15, 1)

    def loss(p, key):
        out = module.apply({"params": p}, ids, attention_mask=mask, deterministic=False, rngs={"dropout": key})
        return jnp.mean(out.logits ** 2)

    value, grads = jax.jit(jax.value_and_grad(loss))(params, jax.random.key(0))
    evaluated = jnp.mean(module.apply({"params": params}, ids, attention_mask=mask).logits ** 2)
    assert np.isfinite(value) and abs(float(value) - float(evaluated)) > 1e-6
    conv = grads["deberta"]["encoder"]["conv"]["conv"]["kernel"]
    rel = grads["deberta"]["encoder"]["rel_embeddings"]["embedding"]
    assert float(jnp.abs(conv).max()) > 0 and float(jnp.abs(rel).max()) > 0
