"""DeBERTa's relative terms without a [B, N, T, T] gather: relative_bias (each query / key scored against every
distance, then skewed by reshapes) equals the formulation it replaced, the [.., T, 2 span] scores gathered with
take_along_axis on the broadcast [T, T] index (c2p) and on its transpose, then keys last (p2c), in float64, at
lengths below, at and past the bucket span and past max_relative_positions, log buckets and none, each term alone
and both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.deberta_v2.attention import relative_bias, relative_index, relative_shift
from tests.helpers.deberta import relative_terms_case


def gathered(config, q, k, pos_key, pos_query, scale):
    """The replaced formulation: [B, N, T, 2 span] scores, a [B, N, T, T] index gathered along the last axis."""
    B, T, N, _ = q.shape
    index = jnp.asarray(relative_index(config, T))
    bias = 0.0
    if "c2p" in config.att_terms:
        c2p = jnp.einsum("BTND,RND->BNTR", q, pos_key)
        bias = bias + jnp.take_along_axis(c2p, jnp.broadcast_to(index, (B, N, T, T)), axis=-1) / scale
    if "p2c" in config.att_terms:
        p2c = jnp.einsum("BSND,RND->BNSR", k, pos_query)
        p2c = jnp.take_along_axis(p2c, jnp.broadcast_to(index.T, (B, N, T, T)), axis=-1)
        bias = bias + jnp.swapaxes(p2c, -1, -2) / scale
    return bias


CASES = [  # (position_buckets, max_relative_positions, pos_att_type, lengths)
    (8, 16, "p2c|c2p", (1, 2, 5, 8, 13, 16, 40)),  # the tests' v3 style: T past the buckets and past max_relative
    (0, 16, "p2c|c2p", (3, 16, 33)),  # v2 style: no buckets, the index clipped past the span
    (256, 512, "p2c|c2p", (130, 300)),  # DeBERTa-v3-base's buckets, T past the linear range and past the span
    (8, 16, "c2p", (11,)),
    (8, 16, "p2c", (11,)),
]


@pytest.mark.parametrize("buckets,max_rel,terms,lengths", CASES)
def test_relative_bias_equals_the_gathered_formulation(buckets, max_rel, terms, lengths):
    with jax.enable_x64(True):
        config, rng, scale, pos_key, pos_query = relative_terms_case(buckets, max_rel, terms)
        for T in lengths:
            q, k = (jnp.asarray(rng.normal(size=(2, T, 2, 4))) for _ in range(2))
            want = gathered(config, q, k, pos_key, pos_query, scale)
            got = jax.jit(lambda *a: relative_bias(config, *a))(q, k, pos_key, pos_query, scale)
            assert got.shape == (2, 2, T, T) and got.dtype == jnp.float64
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12, err_msg=f"T={T}")
            assert float(jnp.abs(want).max()) > 1.0  # the terms are not vanishingly small


def test_relative_shift_reads_the_diagonals():
    """out[i, j] = x[i, j + T - 1 - i] on an array whose entries name their own row and column."""
    T = 6
    x = np.arange(T)[:, None] * 100 + np.arange(2 * T - 1)[None, :]
    out = np.asarray(relative_shift(jnp.asarray(x)[None]))[0]
    i, j = np.indices((T, T))
    assert np.array_equal(out, i * 100 + j + T - 1 - i)
