"""What a step compiled for a CPU runs differently (jaxbert.model.options.target_kind() == "cpu"), against
references that share no code with it: the tied decoder's written-out backward (tied_logits), argmax taken in
chunks (predicted), the MLM loss and guess from one custom VJP (nll_and_predicted), and ModernBERT's Wqkv as
rows. Each is also checked to be the plain lowering elsewhere."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.engine.step import CPU_FUSED_MIN_VOCAB, nll_and_predicted, predicted
from jaxbert.model.layers.vocab import tied_logits
from jaxbert.model.options import compiling_for, target_kind

TPU = [SimpleNamespace(device_kind="TPU v5 lite")]


def _numpy_decoder_grads(x, table, bias, g):
    """logits = x table^T + bias; the cotangent g [..., V] taken back by hand in float64."""
    rows, xs = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
    return (rows @ table).reshape(x.shape), rows.T @ xs, rows.sum(axis=0)


@pytest.mark.parametrize("kind", [None, "TPU v5 lite"])
def test_tied_logits_value_and_gradients_in_float64(kind):
    jax.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(3, 5, 8))
        table = rng.normal(size=(37, 8)) * 0.2  # [V, H]
        bias = rng.normal(size=(37,))
        g = rng.normal(size=(3, 5, 37))
        with compiling_for([SimpleNamespace(device_kind=kind)] if kind else []):
            assert target_kind() == (kind or "cpu")
            out, vjp = jax.vjp(lambda *a: tied_logits(*a), jnp.asarray(x), jnp.asarray(table), jnp.asarray(bias))
            dx, dtable, dbias = vjp(jnp.asarray(g))
        np.testing.assert_allclose(np.asarray(out), x @ table.T + bias, rtol=1e-12, atol=1e-12)
        want = _numpy_decoder_grads(x, table, bias, g)
        for got, ref, name in zip((dx, dtable, dbias), want, ("x", "table", "bias")):
            assert got.shape == ref.shape, name
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-12, err_msg=name)
        # no bias: the same, with None's gradient None
        _, vjp = jax.vjp(lambda a, b: tied_logits(a, b, None), jnp.asarray(x), jnp.asarray(table))
        np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(g))[1]), want[1], rtol=1e-12, atol=1e-12)
    finally:
        jax.config.update("jax_enable_x64", False)


def test_tied_logits_bias_gradient_sums_bfloat16_rows_in_float32():
    """4096 rows of 1 + 2^-7: a bf16 running sum would stall far below; the ones-matmul accumulates in float32."""
    g = jnp.full((64, 64, 3), 1.0 + 2.0**-7, jnp.bfloat16)
    x, table, bias = jnp.zeros((64, 64, 2), jnp.bfloat16), jnp.zeros((3, 2), jnp.bfloat16), jnp.zeros(3, jnp.bfloat16)
    _, vjp = jax.vjp(tied_logits, x, table, bias)
    dbias = vjp(g)[2]
    assert dbias.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(dbias, np.float32), np.full(3, 4096 * (1.0 + 2.0**-7), np.float32))


def _first_max(x):
    """numpy's argmax with NaN first: the index of the first NaN of a row that has one."""
    nan = np.isnan(x)
    return np.where(nan.any(-1), nan.argmax(-1), np.nanargmax(np.where(nan, -np.inf, x), -1))


@pytest.mark.parametrize("V", [50368, 30522, 997, 12])
def test_predicted_is_argmax_with_ties_and_nans(V):
    """Chunked on a CPU (787 x 64 for ModernBERT's vocabulary, 5,087 x 6 for BERT's; 997 is prime: one chunk):
    the first index of the largest, even where the largest repeats across chunks or inside one, and the first
    NaN's index where a row holds NaNs."""
    rng = np.random.default_rng(V)
    x = rng.normal(size=(4, 6, V)).astype(np.float32)
    x[0, 0, [V - 1, V // 2, 5]] = 9.0  # a tie across chunks: the first (5) wins
    x[0, 1, [3, 4]] = 9.0  # a tie inside one chunk
    x[0, 2, V - 1] = 9.0  # the largest last
    x[1, 0, [V // 3, V - 2]] = np.nan  # NaNs win, the first of them
    x[1, 1, :] = 0.0  # all equal: index 0
    want = _first_max(x)
    assert want[0, 0] == 5 and want[1, 0] == V // 3 and want[1, 1] == 0
    np.testing.assert_array_equal(np.asarray(jax.jit(predicted)(jnp.asarray(x))), want)
    np.testing.assert_array_equal(np.asarray(jnp.argmax(jnp.asarray(x), -1)), want)  # the semantics kept
    with compiling_for(TPU):
        assert "argmax" in str(jax.make_jaxpr(predicted)(jnp.asarray(x)))
        np.testing.assert_array_equal(np.asarray(jax.jit(predicted)(jnp.asarray(x))), want)


def test_predicted_on_a_cpu_reads_chunks_not_the_whole_row():
    """The chunked form is what a CPU step traces: its argmax runs over one chunk [.., 787], not [.., 50368]."""
    text = str(jax.make_jaxpr(predicted)(jnp.zeros((2, 3, 50368))))
    assert "argmax" in text and "f32[2,3,787]" in text and "f32[2,3,50368] = argmax" not in text


def _numpy_nll(x, labels, g):
    """-log softmax(x)[label] and its gradient times g, in float64 by hand (a negative label counts from the end)."""
    x = x.astype(np.float64)
    top = x.max(-1, keepdims=True)
    z = np.log(np.exp(x - top).sum(-1)) + top[..., 0]
    index = np.where(labels < 0, labels + x.shape[-1], labels)
    picked = np.take_along_axis(x, index[..., None], -1)[..., 0]
    probs = np.exp(x - z[..., None])
    onehot = np.arange(x.shape[-1]) == index[..., None]
    return z - picked, (probs - onehot) * g[..., None]


@pytest.mark.parametrize("V", [50368, 30522, 16411])
def test_nll_and_predicted_on_a_cpu_in_float64(V):
    """The loss, its gradient and the guess against numpy, with ties across chunks and inside one, a negative label
    and a row whose logits are all equal; then a row with a NaN: the guess is its first NaN (the whole argmax).
    64 chunks of 787, 6 of 5,087, and a prime vocabulary: one chunk."""
    jax.config.update("jax_enable_x64", True)
    try:
        rng = np.random.default_rng(V + 1)
        x = rng.normal(size=(3, 5, V)) * 4
        x[0, 0, [V - 1, V // 2, 5]] = 30.0
        x[0, 1, [3, 4]] = 30.0
        x[2, 4, :] = 0.5
        labels = rng.integers(0, V, size=(3, 5))
        labels[0, 0], labels[0, 1], labels[1, 2] = V // 2, 3, -1  # a tie's later index is no correct guess
        g = rng.normal(size=(3, 5))
        (nll, guess), vjp = jax.vjp(lambda a: nll_and_predicted(a, jnp.asarray(labels)), jnp.asarray(x))
        assert "_nll_predicted" in str(jax.make_jaxpr(lambda a: nll_and_predicted(a, jnp.asarray(labels)))(x))
        (dx,) = vjp((jnp.asarray(g), np.zeros(guess.shape, jax.dtypes.float0)))
        want_nll, want_dx = _numpy_nll(x, labels, g)
        np.testing.assert_allclose(np.asarray(nll), want_nll, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(np.asarray(guess), _first_max(x))
        assert guess[0, 0] == 5 and guess[0, 1] == 3 and guess[2, 4] == 0
        x[1, 3, [V // 3, V - 2]] = np.nan
        guess = jax.jit(lambda a: nll_and_predicted(a, jnp.asarray(labels))[1])(jnp.asarray(x))
        np.testing.assert_array_equal(np.asarray(guess), _first_max(x))
        assert guess[1, 3] == V // 3
    finally:
        jax.config.update("jax_enable_x64", False)


def test_nll_and_predicted_in_float32_is_the_plain_loss_and_elsewhere_the_plain_path():
    """float32 on a CPU: the same loss bits as optax's and the same guess as argmax, the gradient within rounding;
    for a TPU (and for bf16 logits) no custom VJP is traced."""
    import optax
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(4, 20, 30522)).astype(np.float32) * 3)
    labels = jnp.asarray(rng.integers(0, 30522, size=(4, 20)))
    plain = jax.jit(lambda a: optax.softmax_cross_entropy_with_integer_labels(a, labels))
    fused = jax.jit(lambda a: nll_and_predicted(a, labels))
    nll, guess = fused(x)
    np.testing.assert_array_equal(np.asarray(nll), np.asarray(plain(x)))
    np.testing.assert_array_equal(np.asarray(guess), np.asarray(jnp.argmax(x, -1)))
    g_plain = jax.grad(lambda a: jnp.sum(plain(a) * jnp.arange(20.0)))(x)
    g_fused = jax.grad(lambda a: jnp.sum(nll_and_predicted(a, labels)[0] * jnp.arange(20.0)))(x)
    np.testing.assert_allclose(np.asarray(g_fused), np.asarray(g_plain), rtol=0,
                               atol=2e-6 * float(jnp.abs(g_plain).max()))
    assert "_nll_predicted" in str(jax.make_jaxpr(lambda a: nll_and_predicted(a, labels))(x))
    small = x[..., :CPU_FUSED_MIN_VOCAB - 1]  # a vocabulary under the threshold: the plain path
    for kind, logits in (("TPU v5 lite", x), (None, x.astype(jnp.bfloat16)), (None, small)):
        with compiling_for(TPU if kind else []):
            assert "_nll_predicted" not in str(jax.make_jaxpr(lambda a: nll_and_predicted(a, labels))(logits))
