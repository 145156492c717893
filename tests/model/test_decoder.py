"""Decoder mode: causal self-attention, cross-attention, the key/value cache and generate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.options import ModelOptions
from jaxbert import BertConfig, BertLMHeadModel
from jaxbert.infer import generate as gen

CFG = BertConfig(vocab_size=83, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=40, is_decoder=True)


def _setup(pos, cross, scan=False):
    cfg = CFG.replace(position_embedding_type=pos, add_cross_attention=cross)
    model = BertLMHeadModel(cfg, ModelOptions(scan_layers=scan))
    rng = np.random.default_rng(1)
    ids = rng.integers(1, cfg.vocab_size, (2, 9)).astype(np.int32)
    enc = rng.normal(size=(2, 5, cfg.hidden_size)).astype(np.float32) if cross else None
    enc_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32) if cross else None
    variables = model.init(jax.random.key(0), ids, encoder_hidden_states=enc)
    # Random, non-zero biases and LayerNorms, so every param matters.
    leaves, tree = jax.tree_util.tree_flatten(variables)
    keys = jax.random.split(jax.random.key(7), len(leaves))
    variables = jax.tree_util.tree_unflatten(
        tree, [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
    return model, variables, ids, enc, enc_mask


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("pos", ["absolute", "relative_key", "relative_key_query"])
def test_incremental_decoding_equals_full_recomputation(pos, cross):
    model, variables, ids, enc, enc_mask = _setup(pos, cross)
    B, L = ids.shape
    full = model.apply(variables, ids, encoder_hidden_states=enc, encoder_attention_mask=enc_mask).logits

    cache = gen.init_cache(model, B, L, enc)
    decoder = model.clone(options=model.options.replace(decode=True))
    # prefill 4 tokens, then one token at a time; positions come from the cache
    chunks, logits = [(0, 4)] + [(i, i + 1) for i in range(4, L)], []
    for n, (a, b) in enumerate(chunks):
        out, mutated = decoder.apply(
            {**variables, "cache": cache}, ids[:, a:b],
            encoder_hidden_states=enc if n == 0 else None, encoder_attention_mask=enc_mask,
            mutable=["cache"])
        cache = mutated["cache"]
        logits.append(out.logits)
    np.testing.assert_allclose(jnp.concatenate(logits, axis=1), full, atol=1e-5)


def test_cache_works_with_scanned_layers():
    model, variables, ids, enc, enc_mask = _setup("relative_key", True)
    from jaxbert import scan_params
    scanned = BertLMHeadModel(model.config, ModelOptions(scan_layers=True))
    sv = scan_params(variables)
    full = model.apply(variables, ids, encoder_hidden_states=enc, encoder_attention_mask=enc_mask).logits
    out = gen.generate(scanned, sv, ids[:, :4], max_new_tokens=3, encoder_hidden_states=enc,
                       encoder_attention_mask=enc_mask)
    ref = gen.generate(model, variables, ids[:, :4], max_new_tokens=3, encoder_hidden_states=enc,
                       encoder_attention_mask=enc_mask)
    np.testing.assert_array_equal(out, ref)
    assert full.shape == (2, 9, CFG.vocab_size)


def _greedy_by_recomputation(model, variables, ids, mask, n, enc=None, enc_mask=None):
    """The slow reference: rerun the whole sequence for every new token."""
    ids, mask = np.asarray(ids), np.asarray(mask)
    for _ in range(n):
        pos = np.maximum(np.cumsum(mask, 1) - 1, 0)
        logits = model.apply(variables, ids, attention_mask=mask, position_ids=pos,
                             encoder_hidden_states=enc, encoder_attention_mask=enc_mask).logits
        nxt = np.asarray(jnp.argmax(logits[:, -1], -1))[:, None].astype(np.int32)
        ids = np.concatenate([ids, nxt], 1)
        mask = np.concatenate([mask, np.ones_like(nxt)], 1)
    return ids


@pytest.mark.parametrize("pos, cross", [("absolute", False), ("relative_key_query", True)])
def test_greedy_generate_matches_recomputation_with_left_padding(pos, cross):
    model, variables, ids, enc, enc_mask = _setup(pos, cross)
    prompt = ids[:, :5].copy()
    mask = np.ones_like(prompt)
    prompt[1, :2] = 0  # row 1 is a left-padded, shorter prompt
    mask[1, :2] = 0
    out = gen.generate(model, variables, prompt, mask, max_new_tokens=6,
                       encoder_hidden_states=enc, encoder_attention_mask=enc_mask)
    ref = _greedy_by_recomputation(model, variables, prompt, mask, 6, enc, enc_mask)
    np.testing.assert_array_equal(out, ref)


def test_generation_compiles_once_and_samples_from_top_k():
    model, variables, ids, _, _ = _setup("absolute", False)
    gen._generate.clear_cache()
    a = gen.generate(model, variables, ids[:, :4], max_new_tokens=8, temperature=1.0, top_k=3,
                     rng=jax.random.key(1))
    assert gen._generate._cache_size() == 1  # the whole generation, every token, is one compile
    b = gen.generate(model, variables, ids[:, 4:8], max_new_tokens=8, temperature=0.7, top_k=3,
                     rng=jax.random.key(2))
    assert gen._generate._cache_size() == 1  # new prompt, temperature and key: nothing recompiles
    assert not np.array_equal(a[:, 4:], b[:, 4:])
    # every sampled token is among the top 3 of its step's logits
    logits = model.apply(variables, a).logits
    top3 = np.asarray(jax.lax.top_k(logits, 3)[1])
    for t in range(4, 12):
        assert all(a[r, t] in top3[r, t - 1] for r in range(2))
    # top_k=1 sampling is greedy
    greedy = gen.generate(model, variables, ids[:, :4], max_new_tokens=8)
    top1 = gen.generate(model, variables, ids[:, :4], max_new_tokens=8, temperature=1.0, top_k=1)
    np.testing.assert_array_equal(greedy, top1)


def test_eos_pads_the_rest_and_errors_are_clear():
    model, variables, ids, _, _ = _setup("absolute", False)
    greedy = np.asarray(gen.generate(model, variables, ids[:, :4], max_new_tokens=6))
    eos = int(greedy[0, 5])  # the second generated token of row 0
    out = np.asarray(gen.generate(model, variables, ids[:, :4], max_new_tokens=6, eos_token_id=eos,
                                  pad_token_id=0))
    assert out[0, 5] == eos and np.all(out[0, 6:] == 0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        gen.generate(model, variables, ids, max_new_tokens=40)
    encoder = BertLMHeadModel.__mro__[0](CFG.replace(is_decoder=False))
    with pytest.raises(ValueError, match="is_decoder"):
        gen.generate(encoder, variables, ids)
