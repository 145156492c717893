"""ModelOptions.first_token_only: the pooled heads' last layer at the first token alone gives the same
logits and gradients as the whole layer, with less work, and steps aside where more is asked for."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.bert.config import BertConfig
from jaxbert.model.classes import build_model
from jaxbert.model.options import ModelOptions

B, T = 4, 12
SMALL = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
             num_labels=3, max_position_embeddings=64)


def _inputs(shape=(B, T), seed=0):
    rng = np.random.default_rng(seed)
    ids = jnp.asarray(rng.integers(5, 100, shape), jnp.int32)
    lengths = rng.integers(2, shape[-1] + 1, shape[:-1])
    mask = jnp.asarray((np.arange(shape[-1]) < lengths[..., None]).astype(np.int32))
    types = jnp.asarray((np.arange(shape[-1]) >= shape[-1] // 2).astype(np.int32) * np.ones(shape, np.int32))
    return ids, types, mask


def _pair(name, cfg, dtype=jnp.float64, **options):
    whole = build_model(name, cfg, ModelOptions(dtype=dtype, param_dtype=dtype, **options))
    first = build_model(name, cfg, ModelOptions(dtype=dtype, param_dtype=dtype, first_token_only=True, **options))
    return whole, first


CASES = [
    ("BertForSequenceClassification", {}),
    ("BertForSequenceClassification", {"position_embedding_type": "relative_key_query"}),
    ("BertForSequenceClassification", {"model_type": "roberta", "pad_token_id": 1}),  # its head, no pooler
    ("BertForNextSentencePrediction", {}),
    ("BertForMultipleChoice", {}),
]


@pytest.mark.parametrize("name,changes", CASES)
def test_same_logits_and_gradients_in_float64(name, changes):
    jax.config.update("jax_enable_x64", True)
    try:
        cfg = BertConfig(**{**SMALL, **changes})
        shape = (B, 2, T) if name == "BertForMultipleChoice" else (B, T)
        ids, types, mask = _inputs(shape)
        whole, first = _pair(name, cfg)
        params = whole.init(jax.random.PRNGKey(0), ids, types)["params"]
        a = whole.apply({"params": params}, ids, types, mask)
        b = first.apply({"params": params}, ids, types, mask)
        assert np.abs(np.asarray(a.logits) - np.asarray(b.logits)).max() <= 1e-12
        assert b.last_hidden_state.shape[-2] == 1 and a.last_hidden_state.shape[-2] == T

        def loss(module):
            return lambda p: jnp.sum(jnp.sin(module.apply({"params": p}, ids, types, mask).logits))
        ga, gb = jax.grad(loss(whole))(params), jax.grad(loss(first))(params)
        diff = jax.tree_util.tree_map(lambda x, y: float(jnp.abs(x - y).max()), ga, gb)
        assert max(jax.tree_util.tree_leaves(diff)) <= 1e-10
        # the last layer's query/FFN params get gradients from the first token only: still nonzero
        last = ga[cfg.base_prefix]["encoder"]["layer"][str(cfg.num_hidden_layers - 1)]
        assert float(jnp.abs(last["intermediate"]["dense"]["kernel"]).max()) > 0
    finally:
        jax.config.update("jax_enable_x64", False)


def test_float32_and_dot_product_attention_and_packed_segments_agree():
    cfg = BertConfig(**SMALL)
    ids, types, mask = _inputs()
    segments = jnp.asarray(np.repeat([[1] * 5 + [2] * 7], B, 0), jnp.int32)
    for options in ({}, {"attention_impl": "dot_product"}):
        whole, first = _pair("BertForSequenceClassification", cfg, jnp.float32, **options)
        params = whole.init(jax.random.PRNGKey(1), ids, types)["params"]
        for kw in ({}, {"segment_ids": segments}):
            a = whole.apply({"params": params}, ids, types, mask, **kw).logits
            b = first.apply({"params": params}, ids, types, mask, **kw).logits
            assert np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-6


def test_the_work_saved_is_most_of_a_layer():
    cfg = BertConfig(**SMALL)
    ids, types, mask = _inputs()
    whole, first = _pair("BertForSequenceClassification", cfg, jnp.float32)
    params = whole.init(jax.random.PRNGKey(0), ids, types)["params"]

    def flops(module):
        fn = jax.jit(lambda p: module.apply({"params": p}, ids, types, mask).logits)
        cost = fn.lower(params).compile().cost_analysis()
        return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]
    H, I = cfg.hidden_size, cfg.intermediate_size
    per_token_saved = 2 * (2 * H * H + 2 * H * I)  # query, output dense, and the feed-forward block
    saved = flops(whole) - flops(first)
    assert saved >= 0.9 * per_token_saved * B * (T - 1)


def test_ignored_where_hidden_states_attentions_or_scan_are_asked_for():
    cfg = BertConfig(**SMALL)
    ids, types, mask = _inputs()
    whole, first = _pair("BertForSequenceClassification", cfg, jnp.float32)
    params = whole.init(jax.random.PRNGKey(0), ids, types)["params"]
    out = first.apply({"params": params}, ids, types, mask, output_hidden_states=True, output_attentions=True)
    ref = whole.apply({"params": params}, ids, types, mask, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (B, T, cfg.hidden_size) and len(out.hidden_states) == 4
    assert np.allclose(out.hidden_states[-1], ref.hidden_states[-1]) and out.attentions[-1].shape[-2] == T
    scanned = build_model("BertForSequenceClassification", cfg, ModelOptions(scan_layers=True, first_token_only=True))
    sp = scanned.init(jax.random.PRNGKey(0), ids, types)["params"]
    assert scanned.apply({"params": sp}, ids, types, mask).last_hidden_state.shape == (B, T, cfg.hidden_size)
    # a head reading every token (token classification) is untouched by the option
    tagger = build_model("BertForTokenClassification", cfg, ModelOptions(first_token_only=True))
    tp = tagger.init(jax.random.PRNGKey(0), ids, types)["params"]
    assert tagger.apply({"params": tp}, ids, types, mask).logits.shape == (B, T, cfg.num_labels)
