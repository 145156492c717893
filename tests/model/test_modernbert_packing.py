"""Packed rows for ModernBERT (segment_ids): a row [doc A | doc B | doc C | pad] gives each document
the last hidden state and logits it gets alone, in float32 within 1e-5, with documents longer than
the local window (global and sliding layers both present), on the einsum and dot_product paths,
scanned or not; without segment_ids the documents leak into each other."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.modernbert import build
from jaxbert.model.options import ModelOptions
from tests.helpers.modernbert import config_of, params_of, tiny_hf

NAME = "ModernBertForMaskedLM"
# 7 layers: global, then (sliding, global) x 3 (a scanned stack runs them in groups); a window of 4 (+-2 tokens),
# far shorter than each document.
SMALL_WINDOW = dict(local_attention=4, global_attn_every_n_layers=2, num_hidden_layers=7)
LENGTHS = (7, 9, 5)  # doc A, doc B, doc C; then 3 padding tokens: T = 24
T = 24


@pytest.fixture(scope="module")
def model():
    hf = tiny_hf(NAME, seed=11, **SMALL_WINDOW)
    config = config_of(hf)
    assert config.half_window == 2 and set(config.layer_kinds) == {"full_attention", "sliding_attention"}
    assert config.global_theta != config.local_theta
    return config, hf


def _packed():
    rng = np.random.default_rng(0)
    docs = [rng.integers(3, 100, n).astype(np.int32) for n in LENGTHS]
    pad = T - sum(LENGTHS)
    ids = np.concatenate(docs + [np.zeros(pad, np.int32)])[None]
    segments = np.concatenate([np.full(n, i + 1, np.int32) for i, n in enumerate(LENGTHS)]
                              + [np.zeros(pad, np.int32)])[None]
    mask = (segments > 0).astype(np.int32)
    return docs, ids, mask, segments


def _apply(module, params, ids, mask, segments=None):
    fn = jax.jit(lambda p, i, m, s: module.apply({"params": p}, i, attention_mask=m, segment_ids=s))
    return fn(params, jnp.asarray(ids), jnp.asarray(mask), None if segments is None else jnp.asarray(segments))


OPTIONS = [dict(attention_impl="einsum"), dict(attention_impl="dot_product"),
           dict(attention_impl="einsum", scan_layers=True), dict(attention_impl="dot_product", scan_layers=True),
           dict(attention_impl="einsum", attention_chunks=2),
           # segment ids formed once by the model, the scanned layers of this 7-layer model in groups of static kinds
           dict(attention_impl="blocked"), dict(attention_impl="blocked", scan_layers=True)]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(f"{v}" for v in o.values()))
def test_each_packed_document_gets_what_it_gets_alone(model, opts):
    config, hf = model
    scan = opts.get("scan_layers", False)
    module, params = build(NAME, config, ModelOptions(**opts)), params_of(hf, NAME, scan)
    docs, ids, mask, segments = _packed()
    packed = _apply(module, params, ids, mask, segments)
    start = 0
    for doc in docs:
        n = len(doc)
        alone = _apply(module, params, doc[None], np.ones((1, n), np.int32))
        for field in ("last_hidden_state", "logits"):
            got = np.asarray(getattr(packed, field))[0, start:start + n]
            want = np.asarray(getattr(alone, field))[0]
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"{field} of a {n}-token doc")
        start += n


@pytest.mark.parametrize("impl", ["einsum", "dot_product"])
def test_without_segment_ids_the_documents_leak(model, impl):
    """The check above would fail without the mask: doc B's logits move by far more than 1e-5."""
    config, hf = model
    module, params = build(NAME, config, ModelOptions(attention_impl=impl)), params_of(hf, NAME)
    docs, ids, mask, segments = _packed()
    a, b = LENGTHS[0], LENGTHS[0] + LENGTHS[1]
    alone = np.asarray(_apply(module, params, docs[1][None], np.ones((1, LENGTHS[1]), np.int32)).logits)[0]
    unmasked = np.asarray(_apply(module, params, ids, mask).logits)[0, a:b]
    assert np.abs(unmasked - alone).max() > 1e-2


def test_rotary_positions_restart_at_each_document(model, monkeypatch):
    """RoPE is relative, so within-document masking alone already gives the documents their own
    logits (to rounding); the positions fed to both thetas' tables still restart at 0 per document."""
    from jaxbert.model.modernbert import modules
    config, hf = model
    seen = []
    real = modules.rope_tables

    def recording(positions, head_dim, theta, dtype):
        seen.append((theta, np.asarray(positions)))
        return real(positions, head_dim, theta, dtype)

    monkeypatch.setattr(modules, "rope_tables", recording)
    _, ids, mask, segments = _packed()
    build(NAME, config).apply({"params": params_of(hf, NAME)}, jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                              segment_ids=jnp.asarray(segments))
    want = np.concatenate([np.arange(n) for n in LENGTHS] + [np.arange(T - sum(LENGTHS))])[None]
    assert sorted(theta for theta, _ in seen) == sorted([config.global_theta, config.local_theta])
    for _, positions in seen:
        np.testing.assert_array_equal(positions, want)


def test_segment_ids_of_one_document_change_nothing(model):
    """A row that is one document (segment 1, then padding) computes as the unpacked padded row."""
    config, hf = model
    module, params = build(NAME, config), params_of(hf, NAME)
    _, ids, mask, _ = _packed()
    plain = np.asarray(_apply(module, params, ids, mask).logits)
    one = np.asarray(_apply(module, params, ids, mask, mask).logits)
    real = mask[0].astype(bool)
    np.testing.assert_allclose(one[0, real], plain[0, real], atol=1e-6, rtol=0)
