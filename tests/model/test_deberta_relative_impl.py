"""DeBERTa's two implementations of the relative terms (ModelOptions.relative_impl) give the same numbers: the
one-hot matmul (onehot_bias: products against the table rows, each score's row picked by a constant one-hot)
equals the skew (relative_bias: products against every distance, skewed by reshapes) in float64, values and
gradients within 1e-12, with log buckets (v3 style) and without (v2 style), each term alone and both, at
lengths below and past the span; a tiny model's logits and gradients are the same either way; auto runs the skew
on a CPU and the one-hot where the model is compiled for a TPU the fused kernel cannot serve; an unknown name is
refused."""

import types
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert.engine.recipe import ComputeSection, RecipeError
from jaxbert.model.deberta_v2 import attention, build
from jaxbert.model.options import ModelOptions, compiling_for
from tests.helpers.deberta import padded_ids, relative_terms_case, saved_model

CASES = [  # (position_buckets, max_relative_positions, pos_att_type, lengths)
    (8, 16, "p2c|c2p", (1, 5, 13, 40)),  # v3 style: T past the buckets' linear range and past max_relative
    (0, 16, "p2c|c2p", (3, 33)),  # v2 style: no buckets, the index clipped past the span
    (8, 16, "c2p", (11,)),
    (0, 16, "p2c", (11,)),
]


@pytest.mark.parametrize("buckets,max_rel,terms,lengths", CASES)
def test_onehot_equals_the_skew_values_and_gradients(buckets, max_rel, terms, lengths):
    with jax.enable_x64(True):
        config, rng, scale, pos_key, pos_query = relative_terms_case(buckets, max_rel, terms)
        for T in lengths:
            q, k = (jnp.asarray(rng.normal(size=(2, T, 2, 4))) for _ in range(2))
            weight = jnp.asarray(rng.normal(size=(2, 2, T, T)))

            def run(fn):
                args = (q, k, pos_key, pos_query)
                bias = fn(config, *args, scale)
                grads = jax.grad(lambda *a: jnp.sum(fn(config, *a, scale) * weight), argnums=(0, 1, 2, 3))(*args)
                return bias, grads

            (want, want_grads), (got, got_grads) = jax.jit(lambda: (run(attention.relative_bias),
                                                                     run(attention.onehot_bias)))()
            assert got.shape == (2, 2, T, T) and got.dtype == jnp.float64
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12, err_msg=f"T={T}")
            assert float(jnp.abs(want).max()) > 1.0  # the terms are not vanishingly small
            for name, g, w in zip(("q", "k", "pos_key", "pos_query"), got_grads, want_grads):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=1e-12, err_msg=f"{name} T={T}")
            used = [i for i, t in ((0, "c2p"), (1, "p2c")) if t in config.att_terms]
            assert all(float(jnp.abs(want_grads[i]).max()) > 0.1 for i in used)  # the gradients reach q / k


def test_a_model_gives_the_same_logits_and_gradients_either_way():
    """The v3-style tiny MLM (log buckets, shared keys), float64 end to end (params and compute), so that the two
    paths' float32 roundings do not blur the check; 40 tokens reach past its buckets and max_relative_positions."""
    module, params = jaxbert.from_pretrained(saved_model("DebertaV2ForMaskedLM", "v3"))
    ids, mask = padded_ids(40, 30, 3)
    outs = {}
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda p: jnp.asarray(p, jnp.float64), params)
        weight = jnp.asarray(np.random.RandomState(4).normal(size=(2, 40, module.config.vocab_size)))
        for impl in ("skew", "onehot"):
            options = module.options.replace(relative_impl=impl, dtype=jnp.float64, param_dtype=jnp.float64)
            model = build("DebertaV2ForMaskedLM", module.config, options)
            loss = lambda p: jnp.sum(model.apply({"params": p}, ids, attention_mask=mask).logits * weight)
            spy = mock.MagicMock(wraps=attention.onehot_bias)
            with mock.patch.dict(attention.BIAS, onehot=spy):
                outs[impl] = jax.jit(jax.value_and_grad(loss))(params)
            assert spy.call_count == (2 if impl == "onehot" else 0)  # one call per layer, on the path asked for
    (value, grads), (value1, grads1) = outs["skew"], outs["onehot"]
    assert value.dtype == jnp.float64
    np.testing.assert_allclose(value1, value, rtol=1e-12)
    for g, g1 in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads1)):
        np.testing.assert_allclose(g1, g, rtol=1e-9, atol=1e-12)
    rel = grads1["deberta"]["encoder"]["rel_embeddings"]["embedding"]
    assert float(jnp.abs(rel).max()) > 1e-3  # the relative table is trained through the one-hot path


def test_auto_is_onehot_for_a_tpu_without_the_kernel_and_skew_on_the_cpu():
    """auto: onehot where the fused kernel cannot run on a TPU (a v4; the probabilities returned), skew on a CPU
    or GPU (the kernel's own choices: tests/model/test_deberta_kernel.py)."""
    options = ModelOptions()
    assert options.relative_impl == "auto"
    assert attention.relative_impl(options) == "skew"  # this box's CPU
    with compiling_for([types.SimpleNamespace(device_kind="TPU v4")]):
        assert attention.relative_impl(options) == "onehot"
    with compiling_for([types.SimpleNamespace(device_kind="TPU v5 lite")]):
        assert attention.relative_impl(options, 512, output_attentions=True) == "onehot"
        assert attention.relative_impl(options.replace(relative_impl="skew")) == "skew"
    with compiling_for([types.SimpleNamespace(device_kind="NVIDIA H100")]):
        assert attention.relative_impl(options) == "skew"


def test_an_unknown_relative_impl_is_refused_by_name():
    with pytest.raises(ValueError, match="relative_impl 'gather' is unknown"):
        ModelOptions(relative_impl="gather")
    with pytest.raises(RecipeError, match="model.relative_impl"):
        ComputeSection(relative_impl="gather").check()
