"""The leaner train step: a bf16 softmax residual, and the gradients' norm computed once for logging and clipping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxbert.model.softmax import masked_softmax
from jaxbert.engine.optim import clip_by_global_norm


def _scores(shape=(2, 3, 5, 7), seed=0):
    return 3.0 * jax.random.normal(jax.random.PRNGKey(seed), shape, jnp.float32)


def _mask(shape, seed=9):
    """Random key-padding mask [B, 1, 1, S] with batch row 0 masked entirely."""
    m = jax.random.bernoulli(jax.random.PRNGKey(seed), 0.7, (shape[0], 1, 1, shape[-1]))
    return m.at[0].set(False)


def _wide_softmax(x, mask):
    x = jnp.where(mask, x.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(x, axis=-1)


def test_narrow_softmax_forward_is_the_float32_softmax_rounded_once():
    x = _scores((3, 4, 16, 64)).astype(jnp.bfloat16)
    mask = _mask(x.shape)
    got = np.asarray(masked_softmax(x, mask), np.float32)
    assert masked_softmax(x, mask).dtype == jnp.bfloat16
    want = np.asarray(_wide_softmax(x, mask).astype(jnp.bfloat16), np.float32)
    # exp(z - log(sum)) instead of exp(z) / sum: at most one bf16 step apart, almost always equal
    ulp = np.maximum(np.abs(want), np.finfo(np.float32).tiny) * 2.0 ** -7
    assert np.all(np.abs(got - want) <= ulp)
    assert np.mean(got == want) > 0.99
    assert np.all(got[1:][~np.broadcast_to(np.asarray(mask[1:]), got[1:].shape)] == 0)  # masked keys get 0
    np.testing.assert_array_equal(got[0], 1.0 / x.shape[-1])  # every key masked: uniform, as transformers


def test_narrow_softmax_gradient_matches_the_float32_gradient_to_bf16_rounding():
    x, w = _scores(seed=1).astype(jnp.bfloat16), _scores(seed=2)
    mask = _mask(x.shape, seed=3)
    narrow = jax.grad(lambda s: jnp.sum(masked_softmax(s, mask).astype(jnp.float32) * w))(x)
    wide = jax.grad(lambda s: jnp.sum(_wide_softmax(s, mask) * w))(x)
    assert narrow.dtype == jnp.bfloat16
    narrow = narrow.astype(jnp.float32)
    err = float(jnp.max(jnp.abs(narrow - wide)) / jnp.max(jnp.abs(wide)))
    assert 1e-5 < err < 2 ** -7  # bf16 probabilities in the backward pass: rounding, not a wrong formula
    # each row's gradient sums to zero (softmax is shift-invariant), up to that rounding
    assert float(jnp.max(jnp.abs(narrow.sum(-1)))) < 2 ** -6 * float(jnp.max(jnp.abs(wide)))


def test_float32_softmax_is_jax_softmax_exactly():
    x, w = _scores(seed=3), _scores(seed=4)
    mask = _mask(x.shape, seed=5)
    f = lambda fn: jax.grad(lambda s: jnp.sum(fn(s) * w))(x)
    np.testing.assert_array_equal(f(lambda s: masked_softmax(s, mask)), f(lambda s: _wide_softmax(s, mask)))


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_with_a_given_norm_is_optax_clip(max_norm):
    grads = {"a": _scores((4, 3), 5), "b": {"c": _scores((6,), 6)}}
    ours, theirs = clip_by_global_norm(max_norm), optax.clip_by_global_norm(max_norm)
    want, _ = theirs.update(grads, theirs.init(grads))
    given, state = ours.update(grads, ours.init(grads), grad_norm=optax.tree.norm(grads))
    computed, _ = ours.update(grads, ours.init(grads))
    for got in (given, computed):
        jax.tree_util.tree_map(np.testing.assert_array_equal, got, want)
    # same (empty) state as optax's, so checkpoints written with either restore into the other
    assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(theirs.init(grads))


def test_clip_uses_the_norm_it_is_given():
    grads = {"a": jnp.full((4,), 3.0)}  # norm 6
    clip = clip_by_global_norm(1.0)
    out, _ = clip.update(grads, clip.init(grads), grad_norm=jnp.asarray(12.0))
    np.testing.assert_allclose(out["a"], 3.0 / 12.0)  # scaled by the given norm, not the true one


def test_norm_metrics_off_drops_two_norms_and_changes_nothing_else():
    from jaxbert import BertConfig, BertForMaskedLM
    from jaxbert.engine.optim import make_optimizer
    from jaxbert.train.recipe import OptimSection
    from jaxbert.train.sources import SyntheticMLM
    from jaxbert.engine.step import TrainState
    from jaxbert.train.mlm import train_step

    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32)
    model = BertForMaskedLM(cfg)
    ids = jnp.zeros((1, 16), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    tx, schedule = make_optimizer(OptimSection(learning_rate=1e-2, warmup_steps=0, schedule="constant",
                                               clip_norm=0.05), 10)  # small: the clip acts
    b = next(SyntheticMLM(64, 8, 16, seed=0, mask_rate=0.25))
    batch = {k: v[None] for k, v in b.items()}
    rng = jax.random.PRNGKey(1)
    out = {}
    for flag in (True, False):
        st = TrainState.create(model.apply, params, tx, schedule, norm_metrics=flag)
        out[flag] = jax.device_get(jax.jit(train_step)(st, batch, rng))
    (on, m_on), (off, m_off) = out[True], out[False]
    assert {"update_norm", "param_norm"} <= set(m_on) and not {"update_norm", "param_norm"} & set(m_off)
    jax.tree_util.tree_map(np.testing.assert_array_equal, on.params, off.params)
    assert m_on["grad_norm"] == m_off["grad_norm"] > 0.05  # clipped: the update norm is lr-scaled, not raw
    np.testing.assert_allclose(m_on["param_norm"], float(optax.tree.norm(on.params)), rtol=1e-6)
    assert m_off["finite"] == 1.0


def test_a_run_with_norm_metrics_off_logs_plots_and_finishes(tmp_path, capsys):
    from tests.helpers.runs import metric_rows, write_recipe
    from jaxbert.cli.main import main

    recipe = write_recipe(tmp_path / "tiny.yaml", train={"steps": 6, "log_every": 3, "eval_every": 0,
                                                          "norm_metrics": False}, outputs={"plot": True})
    wd = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(wd)]) == 0
    assert "finished at step 6" in capsys.readouterr().out
    train = [r for r in metric_rows(wd) if "loss" in r]
    assert [r["step"] for r in train] == [3, 6]
    assert all(r["grad_norm"] > 0 and "update_norm" not in r and "param_norm" not in r for r in train)
    assert (wd / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_narrow_cross_entropy_is_float32_cross_entropy_with_a_bf16_gradient():
    from jaxbert.engine.step import cross_entropy
    logits = (4.0 * _scores((3, 5, 300), 10)).astype(jnp.bfloat16)
    labels = jax.random.randint(jax.random.PRNGKey(11), (3, 5), 0, 300)
    w = jax.random.uniform(jax.random.PRNGKey(12), (3, 5))
    wide = lambda l: optax.softmax_cross_entropy_with_integer_labels(l.astype(jnp.float32), labels)
    np.testing.assert_allclose(cross_entropy(logits, labels), wide(logits), rtol=1e-6, atol=1e-6)
    got = jax.grad(lambda l: jnp.sum(cross_entropy(l, labels) * w))(logits)
    want = jax.grad(lambda l: jnp.sum(wide(l) * w))(logits)  # autodiff: float32, rounded to bf16 at the end
    assert got.dtype == jnp.bfloat16
    diff = np.abs(np.asarray(got, np.float32) - np.asarray(want, np.float32))
    assert np.all(diff <= np.abs(np.asarray(want, np.float32)) * 2.0 ** -8 + 1e-12)
    # the label's entry carries the -w: a gradient without the one-hot would not have it
    picked = np.take_along_axis(np.asarray(got, np.float32), np.asarray(labels)[..., None], -1)[..., 0]
    assert np.all(picked < 0)
    # a negative label counts from the end, in the gradient as in the loss (as optax's float32 path does)
    odd = labels.at[0, 0].set(-1).at[1, 2].set(-100)
    got = jax.grad(lambda l: jnp.sum(cross_entropy(l, odd) * w))(logits)
    want = jax.grad(lambda l: jnp.sum(optax.softmax_cross_entropy_with_integer_labels(
        l.astype(jnp.float32), odd) * w))(logits)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2 ** -7, atol=1e-6)
    assert float(got[0, 0, 299]) < 0 and float(got[1, 2, 200]) < 0
    f32 = _scores((3, 5, 300), 13)
    np.testing.assert_array_equal(cross_entropy(f32, labels),
                                  optax.softmax_cross_entropy_with_integer_labels(f32, labels))
