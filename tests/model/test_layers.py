"""The shared layers (jaxbert.model.layers) against hand-written numpy references: RMSNorm, the gated
feed-forward (GeGLU / SwiGLU layouts), grouped-query attention, the attention path choice, and the stack's
period finder."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jaxbert import ModelOptions
from jaxbert.model.layers import attention
from jaxbert.model.layers.feedforward import GatedFeedForward
from jaxbert.model.layers.norms import RMSNorm
from jaxbert.model.layers.stack import kind_period

RNG = np.random.default_rng(0)


def test_rms_norm_matches_numpy_in_float64_and_keeps_bf16():
    x = RNG.normal(size=(2, 5, 16)) * 3.0
    with jax.enable_x64(True):
        norm = RMSNorm(epsilon=1e-5, dtype=jnp.float64, param_dtype=jnp.float64)
        params = nn.meta.unbox(norm.init(jax.random.PRNGKey(0), jnp.asarray(x)))
        scale = RNG.normal(size=16)
        out = norm.apply({"params": {"scale": jnp.asarray(scale)}}, jnp.asarray(x))
        want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * scale
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-13, atol=1e-13)
        assert params["params"]["scale"].shape == (16,)
    bf16 = RMSNorm(epsilon=1e-5, dtype=jnp.bfloat16).apply({"params": {"scale": jnp.ones(16)}},
                                                           jnp.asarray(x, jnp.float32))
    assert bf16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(bf16, np.float32), x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-5),
                               rtol=2e-2, atol=2e-2)


def _silu(a):
    return a / (1.0 + np.exp(-a))


@pytest.mark.parametrize("names", [("Wi", "Wo"), ("gate_proj", "up_proj", "down_proj")])
def test_gated_feed_forward_is_act_of_a_times_b(names):
    H, I = 8, 12
    x = RNG.normal(size=(2, 3, H))
    with jax.enable_x64(True):
        ffn = GatedFeedForward(H, I, "silu", names, False, 0.0, ModelOptions(dtype="float64", param_dtype="float64"),
                               nn.initializers.normal(0.5), nn.initializers.normal(0.5))
        params = nn.meta.unbox(ffn.init(jax.random.PRNGKey(1), jnp.asarray(x)))["params"]
        out = np.asarray(ffn.apply({"params": params}, jnp.asarray(x)))
    p = jax.tree.map(np.asarray, params)
    if len(names) == 2:
        assert p["Wi"]["kernel"].shape == (H, 2 * I)
        h = x @ p["Wi"]["kernel"]
        a, b = h[..., :I], h[..., I:]
    else:
        a, b = x @ p["gate_proj"]["kernel"], x @ p["up_proj"]["kernel"]
    want = (_silu(a) * b) @ p[names[-1]]["kernel"]
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


class _Holder(nn.Module):
    """A module with the options and dropout layer einsum_attention asks its caller for."""

    options: ModelOptions

    def dropout_layer(self, rate):
        from jaxbert.model.dropout import make_dropout
        return make_dropout(self.options.dropout_impl, rate)

    def require_hash_dropout(self, option, what):
        assert self.options.dropout_impl == "hash"

    @nn.compact
    def __call__(self, q, k, v, mask, scale):
        return attention.einsum_attention(self, q, k, v, mask, scale, output_probs=False)[0]


def _reference(q, k, v, mask, scale):
    """Grouped-query attention written per query head: head n reads key/value head n // (N / K)."""
    B, T, N, D = q.shape
    K = k.shape[2]
    out = np.zeros_like(q)
    for n in range(N):
        kv = n // (N // K)
        s = np.einsum("btd,bsd->bts", q[:, :, n], k[:, :, kv]) * scale
        s = np.where(mask[:, 0], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, :, n] = np.einsum("bts,bsd->btd", p, v[:, :, kv])
    return out


@pytest.mark.parametrize("chunks", [1, 2])
def test_grouped_query_attention_matches_a_per_head_reference(chunks):
    B, T, N, K, D = 2, 6, 4, 2, 8
    q, k, v = RNG.normal(size=(B, T, N, D)), RNG.normal(size=(B, T, K, D)), RNG.normal(size=(B, T, K, D))
    lengths = np.array([6, 4])
    mask = (np.arange(T)[None, :] < lengths[:, None])[:, None, None, :]
    with jax.enable_x64(True):
        holder = _Holder(ModelOptions(dtype="float64", attention_chunks=chunks))
        out = holder.apply({}, *(jnp.asarray(a) for a in (q, k, v, mask)), jnp.float64(D ** -0.5))
        np.testing.assert_allclose(np.asarray(out), _reference(q, k, v, mask, D ** -0.5), rtol=1e-12, atol=1e-12)
    dp = attention.dot_product_attention(*(jnp.asarray(a, jnp.float32) for a in (q, k, v)), jnp.asarray(mask),
                                         scale=D ** -0.5)
    np.testing.assert_allclose(np.asarray(dp), _reference(q, k, v, mask, D ** -0.5), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("impl,dtype,needs_probs,fusable,want", [
    ("einsum", "float32", False, True, "einsum"),
    ("dot_product", "float32", False, True, "dot_product"),
    ("dot_product", "float32", True, True, "einsum"),  # probabilities: only einsum forms them
    ("dot_product", "float64", False, True, "einsum"),  # jax's softmax is float32
    ("splash", "float32", False, True, "splash"),
    ("splash", "float64", False, True, "blocked"),  # splash takes float32 and bfloat16
    ("auto", "bfloat16", False, True, "auto"),
    ("blocked", "float32", False, False, "einsum"),  # a position bias or a cache: not fusable
    ("blocked", "float32", True, True, "einsum"),
])
def test_attention_path_takes_the_asked_implementation_or_its_fallback(impl, dtype, needs_probs, fusable, want):
    assert attention.path(ModelOptions(attention_impl=impl, dtype=dtype), needs_probs, fusable) == want


def test_kind_period_finds_the_repeating_pattern():
    assert kind_period(["s", "s", "g"] * 7) == 3
    assert kind_period(["g"] * 6) is None
    assert kind_period(["s", "g", "g"]) is None
