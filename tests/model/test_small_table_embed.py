"""The position and token-type tables' lookup: same values as a gather, gradient as a one-hot matmul.

The reference gradient is numpy's np.add.at (a scatter-add): it shares no code with take_rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.layers.embed import SmallTableEmbed, take_rows


def _scatter_grad(ids, g, rows):
    out = np.zeros((rows, g.shape[-1]), np.float64)
    np.add.at(out, ids.reshape(-1), g.reshape(-1, g.shape[-1]).astype(np.float64))
    return out


def test_take_rows_gradient_is_the_scatter_sum_float32():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(7, 5)).astype(np.float32)
    ids = rng.integers(0, 7, (4, 9)).astype(np.int32)
    g = rng.normal(size=(4, 9, 5)).astype(np.float32)
    out, vjp = jax.vjp(lambda t: take_rows(t, jnp.asarray(ids), 7), jnp.asarray(table))
    np.testing.assert_array_equal(np.asarray(out), table[ids])  # the forward is the gather itself
    (grad,) = vjp(jnp.asarray(g))
    assert grad.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(grad), _scatter_grad(ids, g, 7), rtol=1e-5, atol=1e-5)
    # rows nobody looked up get exactly zero
    unused = sorted(set(range(7)) - set(ids.reshape(-1).tolist()))
    assert not np.asarray(grad)[unused].any()


def test_take_rows_bfloat16_sums_in_float32():
    """2 rows, 4096 lookups of each: bf16 accumulation would lose most of the sum; the matmul keeps fp32."""
    ids = np.tile(np.array([0, 1], np.int32), (64, 64))  # [64, 128]
    g = np.full((64, 128, 3), 1.0 + 2.0**-7, np.float32)  # exactly representable in bf16
    table = jnp.zeros((2, 3), jnp.bfloat16)
    _, vjp = jax.vjp(lambda t: take_rows(t, jnp.asarray(ids), 2), table)
    (grad,) = vjp(jnp.asarray(g, jnp.bfloat16))
    assert grad.dtype == jnp.bfloat16
    exact = 4096 * (1.0 + 2.0**-7)  # 4128, representable in bf16 (8 significant bits: 4128 = 129 * 32)
    np.testing.assert_array_equal(np.asarray(grad, np.float32), np.full((2, 3), exact, np.float32))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_small_table_embed_matches_nn_embed(dtype):
    import flax.linen as nn
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 6, (3, 8)), jnp.int32)
    ours = SmallTableEmbed(6, 4, dtype=dtype)
    theirs = nn.Embed(6, 4, dtype=dtype)
    params = ours.init(jax.random.key(0), ids)
    assert jax.tree.structure(params) == jax.tree.structure(theirs.init(jax.random.key(0), ids))
    np.testing.assert_array_equal(np.asarray(ours.apply(params, ids), np.float32),
                                  np.asarray(theirs.apply(params, ids), np.float32))
    loss = lambda m: (lambda p: (m.apply(p, ids).astype(jnp.float32) ** 2).sum())
    ga, gb = jax.grad(loss(ours))(params), jax.grad(loss(theirs))(params)
    np.testing.assert_allclose(np.asarray(ga["params"]["embedding"]), np.asarray(gb["params"]["embedding"]),
                               rtol=1e-2 if dtype == jnp.bfloat16 else 1e-6, atol=1e-6)


def test_a_large_table_keeps_the_scatter(monkeypatch):
    """Past ONE_HOT_MAX_ROWS the one-hot operand would cost more memory than it saves: nn.Embed's own
    lookup (no take_rows in the jaxpr's custom VJP calls)."""
    from jaxbert.model.layers import embed
    ids = jnp.zeros((2, 3), jnp.int32)
    small = SmallTableEmbed(8, 4)
    params = small.init(jax.random.key(0), ids)
    jaxpr = str(jax.make_jaxpr(lambda p: small.apply(p, ids))(params))
    assert "custom_vjp_call" in jaxpr
    monkeypatch.setattr(embed, "ONE_HOT_MAX_ROWS", 4)
    jaxpr = str(jax.make_jaxpr(lambda p: small.apply(p, ids))(params))
    assert "custom_vjp_call" not in jaxpr
