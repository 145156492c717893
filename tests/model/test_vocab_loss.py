"""The MLM loss over vocabulary chunks (jaxbert.model.vocab_loss.vocab_nll) against the whole logits: the
loss, the argmax and the gradients in hidden, weight and bias, tied ([V, H]) and untied ([H, V]) decoders,
with and without a bias, a vocabulary the chunk does not divide, ties and NaNs, bf16; its memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxbert.engine.step import cross_entropy
from jaxbert.model.vocab_loss import AUTO_MIN_VOCAB, DEFAULT_CHUNK, deferred_vocab_logits, loss_chunk, uses_chunks, \
    vocab_nll


def _logits(x, w, b, columns):
    out = jnp.dot(x.reshape(-1, x.shape[-1]), w if columns else w.T)
    out = out if b is None else out + b
    return out.reshape(*x.shape[:-1], -1)


def _plain(x, w, b, labels, columns):
    """The unchunked loss as the MLM step takes it: whole logits, cross_entropy, jnp.argmax."""
    logits = _logits(x, w, b, columns)
    return cross_entropy(logits, labels), jnp.argmax(logits, -1)


def _case(rng, V, H, columns, bias, dtype, shape=(3, 7)):
    x = jnp.asarray(rng.normal(size=(*shape, H)), dtype)
    w = jnp.asarray(rng.normal(size=(H, V) if columns else (V, H)) * 0.5, dtype)
    b = jnp.asarray(rng.normal(size=(V,)), dtype) if bias else None
    labels = jnp.asarray(rng.integers(0, V, shape), jnp.int32)
    return x, w, b, labels


def _value_and_grads(fn, x, w, b, labels, columns, g):
    """(nll, predicted), and the gradients of sum(nll * g) in x, w (and b)."""
    args = (x, w) if b is None else (x, w, b)

    def loss(*a):
        nll, _ = fn(*a[:2], a[2] if len(a) > 2 else None, labels, columns)
        return jnp.sum(nll * g)
    return fn(x, w, b, labels, columns), jax.grad(loss, argnums=tuple(range(len(args))))(*args)


def _chunked(chunk):
    return jax.jit(lambda x, w, b, labels, columns: vocab_nll(x, w, b, labels, chunk=chunk, columns=columns),
                   static_argnums=4)


@pytest.mark.parametrize("columns", [False, True], ids=["tied", "untied"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("V,chunk", [(1000, 384), (1000, 1000), (1000, 4096), (37, 1)])
def test_float64_loss_argmax_and_gradients_equal_the_whole_logits_within_1e_12(columns, bias, V, chunk):
    """1000 = 2 x 384 + 232: a shorter last chunk; chunk >= V: one; chunk 1: a column at a time."""
    jax.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(V + chunk)
        x, w, b, labels = _case(rng, V, 16, columns, bias, jnp.float64)
        g = jnp.asarray(rng.normal(size=labels.shape))
        (nll, pred), grads = _value_and_grads(_chunked(chunk), x, w, b, labels, columns, g)
        (nll0, pred0), grads0 = _value_and_grads(_plain, x, w, b, labels, columns, g)
        assert nll.dtype == jnp.float64 and nll.shape == labels.shape and pred.dtype == jnp.int32
        np.testing.assert_allclose(np.asarray(nll), np.asarray(nll0), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.asarray(pred), np.asarray(pred0))
        assert len(grads) == len(grads0) == (3 if bias else 2)
        for got, want, name in zip(grads, grads0, ("hidden", "weight", "bias")):
            assert got.shape == want.shape and got.dtype == want.dtype, name
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12, err_msg=name)
    finally:
        jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("columns", [False, True], ids=["tied", "untied"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_float32_equals_the_whole_logits_within_rounding(columns, bias):
    rng = np.random.default_rng(7)
    x, w, b, labels = _case(rng, 1000, 32, columns, bias, jnp.float32, shape=(4, 9))
    g = jnp.asarray(rng.uniform(0, 1, size=labels.shape), jnp.float32)
    (nll, pred), grads = _value_and_grads(_chunked(384), x, w, b, labels, columns, g)
    (nll0, pred0), grads0 = _value_and_grads(_plain, x, w, b, labels, columns, g)
    assert nll.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(nll), np.asarray(nll0), rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(pred), np.asarray(pred0))
    for got, want, name in zip(grads, grads0, ("hidden", "weight", "bias")):
        assert got.dtype == jnp.float32, name
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6, err_msg=name)


def test_negative_labels_count_from_the_end_as_the_plain_loss_reads_them():
    rng = np.random.default_rng(3)
    x, w, b, _ = _case(rng, 1000, 8, False, True, jnp.float32, shape=(5,))
    labels = jnp.asarray([-1, -232, -233, 0, 999], jnp.int32)
    nll, _ = vocab_nll(x, w, b, labels, chunk=384)
    np.testing.assert_allclose(np.asarray(nll), np.asarray(_plain(x, w, b, labels, False)[0]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(nll), np.asarray(_plain(x, w, b, labels % 1000, False)[0]), rtol=1e-6)


@pytest.mark.parametrize("columns", [False, True], ids=["tied", "untied"])
def test_argmax_is_the_first_index_on_ties_across_and_inside_chunks_and_the_first_nan(columns):
    """Integer-valued hidden states and weights: the logits are exact, so the ties are real. Chunks of 384 of
    a 1000-entry vocabulary: 5, 700 and 999 lie in three chunks (999 in the shorter last one)."""
    V, H = 1000, 4
    rng = np.random.default_rng(0)
    table = rng.integers(-3, 3, size=(V, H)).astype(np.float32)
    table[[5, 700, 999]] = 9.0  # the same largest row in three chunks
    table[[400, 401]] = 8.0  # the next largest, twice inside the second chunk
    x = np.array([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [-1, -1, -1, -1], [0, 1, 0, -1]], np.float32)
    out_of_play = np.zeros(V, np.float32)
    out_of_play[[5, 700, 999]] = -100.0
    w = jnp.asarray(table.T if columns else table)

    def pred(bias):
        return np.asarray(vocab_nll(jnp.asarray(x), w, jnp.asarray(bias), jnp.zeros(len(x), jnp.int32), chunk=384,
                                    columns=columns)[1])

    got = pred(np.zeros(V, np.float32))
    np.testing.assert_array_equal(got, (x @ table.T).argmax(-1))
    assert got[0] == got[1] == 5 and got[2] == 0  # across chunks: the first; all equal: 0
    got = pred(out_of_play)
    np.testing.assert_array_equal(got, (x @ table.T + out_of_play).argmax(-1))
    assert got[0] == 400  # inside a chunk: the first
    # NaN wins, the first of them (jnp.argmax's rule), even a NaN in an early chunk against a larger value later
    for nans, first in (([900, 700], 700), ([17], 17)):
        bias = np.zeros(V, np.float32)
        bias[nans] = np.nan
        np.testing.assert_array_equal(pred(bias), np.full(len(x), first))
        np.testing.assert_array_equal(np.asarray(jnp.argmax(jnp.asarray(x @ table.T + bias), -1)), first)


@pytest.mark.parametrize("columns", [False, True], ids=["tied", "untied"])
def test_bfloat16_logits_widened_as_the_narrow_cross_entropy_takes_them(columns):
    """bf16 hidden, weight and bias: the chunk's logits are bf16 (as the head's), the loss float32, the
    gradients bf16; the whole-logits path is step.cross_entropy's narrow one."""
    rng = np.random.default_rng(1)
    x, w, b, labels = _case(rng, 1000, 32, columns, True, jnp.bfloat16, shape=(4, 9))
    g = jnp.ones(labels.shape, jnp.float32)
    (nll, pred), grads = _value_and_grads(_chunked(384), x, w, b, labels, columns, g)
    (nll0, pred0), grads0 = _value_and_grads(_plain, x, w, b, labels, columns, g)
    assert nll.dtype == nll0.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(nll), np.asarray(nll0), rtol=2e-2, atol=2e-2)
    assert np.mean(np.asarray(pred) == np.asarray(pred0)) > 0.9  # bf16 near-ties may round apart
    for got, want, name in zip(grads, grads0, ("hidden", "weight", "bias")):
        assert got.dtype == jnp.bfloat16, name
        got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
        assert np.abs(got - want).max() <= 0.03 * np.abs(want).max() + 1e-3, name


def test_the_choice_of_chunks():
    assert (AUTO_MIN_VOCAB, DEFAULT_CHUNK) == (65536, 8192)
    assert loss_chunk(4096, None) == 0 and loss_chunk(65535, None) == 0  # the demo's 4,096: plain
    assert loss_chunk(65536, None) == loss_chunk(128256, None) == loss_chunk(256000, None) == DEFAULT_CHUNK
    assert loss_chunk(256000, 0) == 0 and loss_chunk(1000, 384) == 384 and loss_chunk(100, 384) == 100
    assert uses_chunks(256000, None) == 0  # outside the MLM step's deferred_vocab_logits: logits
    with deferred_vocab_logits():
        assert uses_chunks(256000, None) == DEFAULT_CHUNK and uses_chunks(4096, None) == 0
        assert uses_chunks(4096, 1024) == 1024
    assert uses_chunks(256000, None) == 0
    with pytest.raises(ValueError, match="chunk must be a positive integer"):
        vocab_nll(jnp.zeros((2, 4)), jnp.zeros((8, 4)), None, jnp.zeros(2, jnp.int32), chunk=0)


def _temp_bytes(fn, *args) -> int:
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_memory_follows_the_chunk_not_the_vocabulary():
    """Loss and gradients at N = 512 rows, V = 131,072, H = 16: the whole logits' [N, V] float32 is 256 MiB
    (and autodiff holds more than one such array); chunks of 8,192 hold [N, 8,192]."""
    N, V, H = 512, 131072, 16
    x = jax.ShapeDtypeStruct((N, H), jnp.float32)
    w = jax.ShapeDtypeStruct((V, H), jnp.float32)
    b = jax.ShapeDtypeStruct((V,), jnp.float32)
    labels = jax.ShapeDtypeStruct((N,), jnp.int32)

    def grads(loss_fn):
        return jax.grad(lambda x, w, b, labels: jnp.sum(loss_fn(x, w, b, labels)), argnums=(0, 1, 2))

    plain = _temp_bytes(grads(lambda x, w, b, labels: optax.softmax_cross_entropy_with_integer_labels(
        x @ w.T + b, labels)), x, w, b, labels)
    chunked = _temp_bytes(grads(lambda x, w, b, labels: vocab_nll(x, w, b, labels, chunk=DEFAULT_CHUNK)[0]),
                          x, w, b, labels)
    logits = N * V * 4
    assert plain >= logits
    # the [N, chunk] blocks (a few of them, forward and backward) and the [V, H] gradient being written
    assert chunked < logits / 8 and chunked < 8 * N * DEFAULT_CHUNK * 4 + 2 * V * H * 4, (plain, chunked)
