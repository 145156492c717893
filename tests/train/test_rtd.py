"""The replaced-token-detection objective (jaxbert.train.rtd) as functions, on tiny Flax models of the test's own.

The models: an embedding block (word / position / token-type tables under "embeddings", as BERT and ELECTRA
name them, and a LayerNorm), one dense layer, and a head: the generator's decoder tied to its word table, the
discriminator's one logit per token. What is checked: the replacement and its labels, Gumbel-max sampling
against the distribution, the rank AUC against a pairwise count, the loss against a NumPy computation of
its definition, and where each sharing mode's gradients go.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from jaxbert.train import rtd

V, H, L, B = 50, 16, 12, 3


class _Embeddings(nn.Module):
    @nn.compact
    def __call__(self, ids, types):
        pos = jnp.arange(ids.shape[-1])[None]
        x = (nn.Embed(V, H, name="word_embeddings")(ids) + nn.Embed(L, H, name="position_embeddings")(pos)
             + nn.Embed(2, H, name="token_type_embeddings")(types))
        return nn.LayerNorm(name="LayerNorm")(x)


class _Body(nn.Module):
    @nn.compact
    def __call__(self, ids, types, deterministic):
        x = _Embeddings(name="embeddings")(ids, types)
        x = jnp.tanh(nn.Dense(H, name="dense")(x))
        return nn.Dropout(0.1)(x, deterministic=deterministic)


class _Generator(nn.Module):
    @nn.compact
    def __call__(self, ids, types, attention_mask=None, masked_positions=None, deterministic=True, **kw):
        body = _Body(name="enc")
        x = body(ids, types, deterministic)
        x = jnp.take_along_axis(x, masked_positions[..., None], axis=1)
        table = body.variables["params"]["embeddings"]["word_embeddings"]["embedding"]
        return _Out(x @ table.T + self.param("bias", nn.initializers.zeros, (V,)))

    def init_boxed(self, key, *args, **kwargs):
        return self.init(key, *args, **kwargs)


class _Discriminator(nn.Module):
    @nn.compact
    def __call__(self, ids, types, attention_mask=None, deterministic=True, **kw):
        x = _Body(name="enc")(ids, types, deterministic)
        return _Out(nn.Dense(1, name="head")(x))  # [B, L, 1]

    def init_boxed(self, key, *args, **kwargs):
        return self.init(key, *args, **kwargs)


class _Out:
    def __init__(self, logits):
        self.logits = logits


def _batch(seed=0):
    rs = np.random.RandomState(seed)
    ids = rs.randint(5, V, (B, L)).astype(np.int32)
    mask = np.ones((B, L), np.int32)
    mask[2, 9:] = 0  # padding at the end of the last row
    M = 4
    pos = np.stack([np.sort(rs.choice(np.arange(1, 9), M, replace=False)) for _ in range(B)]).astype(np.int32)
    weights = np.ones((B, M), np.float32)
    weights[1, 3] = 0.0  # a padding slot
    pos[1, 3] = 0
    labels = np.take_along_axis(ids, pos, 1)
    inputs = ids.copy()
    np.put_along_axis(inputs, pos, 3, 1)  # [MASK] = 3
    inputs[1, 0] = ids[1, 0]
    return {"input_ids": inputs, "token_type_ids": np.zeros((B, L), np.int32), "attention_mask": mask,
            "masked_positions": pos, "masked_labels": labels, "masked_weights": weights}, ids


def test_replace_masked_puts_samples_at_masked_slots_and_labels_only_changed_tokens():
    ids = jnp.array([[10, 11, 12, 13, 14]])
    inputs = jnp.array([[10, 3, 12, 3, 14]])
    pos, orig = jnp.array([[1, 3, 0]]), jnp.array([[11, 13, 0]])
    sampled, w = jnp.array([[20, 13, 99]]), jnp.array([[1.0, 1.0, 0.0]])  # slot 2 is padding
    out, replaced = rtd.replace_masked(inputs, pos, orig, sampled, w)
    np.testing.assert_array_equal(out, [[10, 20, 12, 13, 14]])  # position 0 untouched by the padding slot
    np.testing.assert_array_equal(replaced, [[False, True, False, False, False]])  # 13 == original: original
    assert not bool(jnp.any(replaced & (out == ids)))


def test_samples_follow_the_softmax_over_four_tokens():
    p = np.array([0.5, 0.25, 0.15, 0.1])
    logits = jnp.tile(jnp.log(jnp.asarray(p, jnp.float32)) + 3.0, (40000, 1))
    draws = np.asarray(rtd.sample_replacements(jax.random.PRNGKey(1), logits))
    freq = np.bincount(draws, minlength=4) / draws.size
    # 40,000 draws: the standard error of each frequency is below 0.0025
    np.testing.assert_allclose(freq, p, atol=0.01)
    assert np.asarray(rtd.sample_replacements(jax.random.PRNGKey(2), logits[:100])).tolist() != draws[:100].tolist()


def test_cpu_samples_follow_the_softmax_across_chunks_and_never_draw_a_zero():
    """A CPU step with a vocabulary of 16k or more samples by the inverse distribution function over chunks of the
    vocabulary (here 600 = 24 chunks of 25, called directly): tokens at the chunks' edges keep their probabilities,
    a token whose logit is -inf is never drawn. A smaller vocabulary, and a step compiled for a TPU, keep Gumbel-max
    (an argmax over the row)."""
    from jaxbert.engine.step import CPU_FUSED_MIN_VOCAB
    from jaxbert.model.options import compiling_for
    from types import SimpleNamespace
    V = 600
    base = np.random.default_rng(5).normal(size=V).astype(np.float32) - 3.0
    hot, never = [0, 24, 25, 299, 599], [1, 26, 300]
    base[hot], base[never] = [3.0, 2.5, 2.0, 1.5, 1.0], -np.inf
    p = np.exp(base - base.max())
    p /= p.sum()
    draws = np.asarray(jax.jit(rtd._sample_by_cdf)(jax.random.PRNGKey(4), jnp.tile(jnp.asarray(base), (40000, 1))))
    freq = np.bincount(draws, minlength=V) / draws.size
    np.testing.assert_allclose(freq[hot], p[hot], atol=0.006)  # standard errors below 0.0025
    assert freq[never].sum() == 0 and 0.01 < freq[np.setdiff1d(np.arange(V), hot + never)].sum()
    def jaxpr(v):  # a fresh function each time: make_jaxpr would reuse a trace of the same one
        return str(jax.make_jaxpr(lambda k, x: rtd.sample_replacements(k, x))(jax.random.PRNGKey(4), jnp.zeros((2, v))))
    assert "argmax" not in jaxpr(CPU_FUSED_MIN_VOCAB) and "cumsum" in jaxpr(CPU_FUSED_MIN_VOCAB)
    assert "argmax" in jaxpr(V)
    with compiling_for([SimpleNamespace(device_kind="TPU v5 lite")]):
        assert "argmax" in jaxpr(CPU_FUSED_MIN_VOCAB)


def test_rank_auc_is_the_pairwise_count_with_ties_half():
    rs = np.random.RandomState(3)
    scores = np.round(rs.randn(6, 9), 1).astype(np.float32)  # rounded: many ties
    labels = rs.rand(6, 9) < 0.3
    weights = (rs.rand(6, 9) < 0.8).astype(np.float32)
    auc, count = rtd.rank_auc(jnp.asarray(scores), jnp.asarray(labels), jnp.asarray(weights))
    s, y = scores[weights > 0], labels[weights > 0]
    pos, neg = s[y], s[~y]
    want = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    assert float(count) == 1.0
    np.testing.assert_allclose(float(auc), want, rtol=1e-6)
    auc, count = rtd.rank_auc(jnp.asarray(scores), jnp.zeros_like(jnp.asarray(labels)), jnp.asarray(weights))
    assert float(count) == 0.0 and float(auc) == 0.0


def _pair(sharing):
    model = rtd.RtdModel(_Generator(), _Discriminator(), sharing)
    batch, _ = _batch()
    params = model.init_boxed(jax.random.PRNGKey(0), jnp.asarray(batch["input_ids"]),
                              jnp.asarray(batch["token_type_ids"]))["params"]
    return model, params, {k: jnp.asarray(v) for k, v in batch.items()}


def _objective(model, weight, batch, rng):
    spec = rtd.rtd_spec(weight)
    dens = {k: jnp.sum(v) for k, v in spec.weights(batch).items()}

    def f(params):
        sums = spec.sums(spec.forward(params, model.apply, batch, rng, True), batch)
        return spec.objective(sums, dens, batch), sums
    return f


def test_loss_is_mlm_plus_weight_times_bce_over_real_tokens():
    model, params, batch = _pair("tied")
    rng = jax.random.PRNGKey(7)
    loss, sums = _objective(model, 50.0, batch, rng)(params)
    out = model.apply({"params": params}, batch, rng, True)
    logits, w = np.asarray(out["mlm_logits"], np.float64), np.asarray(batch["masked_weights"])
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, np.asarray(batch["masked_labels"])[..., None], -1)[..., 0]
    mlm = (nll * w).sum() / w.sum()
    z, y = np.asarray(out["disc_logits"], np.float64), np.asarray(out["replaced"], np.float64)
    real = np.asarray(batch["attention_mask"], np.float64)
    bce = np.logaddexp(0, z) - y * z
    want = mlm + 50.0 * (bce * real).sum() / real.sum()
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    # the discriminator read the original ids with the samples at the (real) masked slots
    ids = np.asarray(out["disc_ids"])
    _, original = _batch()
    for b in range(B):
        for m in range(4):
            if w[b, m] > 0:
                assert ids[b, batch["masked_positions"][b, m]] == out["sampled"][b, m]
    unmasked = np.ones((B, L), bool)
    for b in range(B):
        unmasked[b, np.asarray(batch["masked_positions"])[b][w[b] > 0]] = False
    np.testing.assert_array_equal(ids[unmasked], original[unmasked])
    np.testing.assert_array_equal(np.asarray(out["replaced"]), (ids != original))
    figures = rtd.summarize(jax.device_get(sums), weight=50.0)
    np.testing.assert_allclose(figures["loss"], want, rtol=1e-5)
    assert 0.0 <= figures["rtd_auc"] <= 1.0
    np.testing.assert_allclose(figures["replaced_fraction"], (y * real).sum() / w.sum(), rtol=1e-6)


def _flat(tree):
    return {"/".join(k): v for k, v in traverse_util.flatten_dict(tree).items()}


WORD = "enc/embeddings/word_embeddings/embedding"


@pytest.mark.parametrize("sharing", ["tied", "gdes", "none"])
def test_sharing_sends_each_loss_to_its_embeddings(sharing):
    model, params, batch = _pair(sharing)
    rng = jax.random.PRNGKey(5)
    flat = _flat(params)
    # the generator's own tables: absent when tied (it reads the discriminator's)
    assert (f"generator/{WORD}" in flat) == (sharing != "tied")
    if sharing == "gdes":  # E_delta starts at zero
        assert not np.any(np.asarray(flat[f"discriminator/{WORD}"]))
    grads = {lam: _flat(jax.grad(lambda p: _objective(model, lam, batch, rng)(p)[0])(params)) for lam in (0.0, 50.0)}
    d_word = f"discriminator/{WORD}"
    mlm_only, both = grads[0.0], grads[50.0]
    # whatever the sharing, the MLM loss alone sends nothing into the discriminator's head
    assert not np.any(np.asarray(mlm_only["discriminator/head/kernel"]))
    assert np.any(np.asarray(both["discriminator/head/kernel"]))
    if sharing == "tied":  # one table: the MLM gradient, then both
        assert np.any(np.asarray(mlm_only[d_word]))
        assert not np.allclose(mlm_only[d_word], both[d_word])
    elif sharing == "gdes":  # E_G: the MLM gradient alone; E_delta: the RTD gradient alone
        g_word = f"generator/{WORD}"
        np.testing.assert_array_equal(mlm_only[g_word], both[g_word])
        assert np.any(np.asarray(both[g_word]))
        assert not np.any(np.asarray(mlm_only[d_word])) and np.any(np.asarray(both[d_word]))
        # E_delta's gradient is the discriminator's gradient at its table E_G + E_delta
        gen_p, disc_p = rtd.export_params(params, "gdes")
        out = model.apply({"params": params}, batch, rng, True)

        def disc_loss(table):
            p = traverse_util.flatten_dict(disc_p)
            p[tuple(WORD.split("/"))] = table
            z = _Discriminator().apply({"params": traverse_util.unflatten_dict(p)}, out["disc_ids"],
                                       batch["token_type_ids"]).logits[..., 0]
            real = batch["attention_mask"].astype(jnp.float32)
            bce = jnp.logaddexp(0, z) - out["replaced"] * z
            return 50.0 * jnp.sum(bce * real) / jnp.sum(real)
        want = jax.grad(disc_loss)(_flat(disc_p)[WORD])
        np.testing.assert_allclose(both[d_word], want, rtol=1e-4, atol=1e-6 * float(np.abs(want).max()))
    else:  # none: two tables, each its own loss's
        np.testing.assert_array_equal(mlm_only[f"generator/{WORD}"], both[f"generator/{WORD}"])
        assert not np.any(np.asarray(mlm_only[d_word])) and np.any(np.asarray(both[d_word]))


def test_export_adds_gdes_delta_and_fills_the_tied_generator():
    _, params, _ = _pair("gdes")
    flat = traverse_util.flatten_dict(params)
    key = ("discriminator", *WORD.split("/"))
    flat[key] = flat[key] + 0.25
    gen, disc = rtd.export_params(traverse_util.unflatten_dict(flat), "gdes")
    np.testing.assert_array_equal(_flat(disc)[WORD], _flat(gen)[WORD] + 0.25)
    _, params, _ = _pair("tied")
    gen, disc = rtd.export_params(params, "tied")
    np.testing.assert_array_equal(_flat(gen)[WORD], _flat(disc)[WORD])
    assert set(_flat(gen)) == set(_flat(_pair("none")[1]["generator"]))


@pytest.mark.parametrize("sharing", ["tied", "gdes", "none"])
def test_joint_from_models_inverts_export(sharing):
    """rtd_warmstart.joint_from_models: the joint tree whose export is the two given whole models (tied: the
    discriminator's tables in both; gdes: E_G + (E_D - E_G) = E_D within rounding; none: each its own)."""
    from jaxbert.model.rtd_tables import export_params
    from jaxbert.train.rtd_warmstart import joint_from_models
    rng = np.random.RandomState(0)

    def model(width):
        tables = {n: {"embedding": rng.randn(7, 4).astype(np.float32)} for n in
                  ("word_embeddings", "position_embeddings", "token_type_embeddings")}
        return {"electra": {"embeddings": tables, "encoder": {"w": rng.randn(4, width).astype(np.float32)}}}
    gen, disc = model(2), model(3)
    joint = joint_from_models(gen, disc, sharing)
    out_gen, out_disc = export_params(joint, sharing)
    want_gen_tables = gen if sharing in ("gdes", "none") else disc
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        np.testing.assert_allclose(out_disc["electra"]["embeddings"][name]["embedding"],
                                   disc["electra"]["embeddings"][name]["embedding"], rtol=0, atol=1e-6)
        assert np.array_equal(out_gen["electra"]["embeddings"][name]["embedding"],
                              want_gen_tables["electra"]["embeddings"][name]["embedding"])
    assert np.array_equal(out_gen["electra"]["encoder"]["w"], gen["electra"]["encoder"]["w"])
    assert np.array_equal(out_disc["electra"]["encoder"]["w"], disc["electra"]["encoder"]["w"])
    if sharing == "tied":
        assert "embeddings" not in joint["generator"]["electra"]  # one set of tables, the discriminator's
