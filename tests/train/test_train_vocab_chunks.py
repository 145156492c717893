"""The MLM step with the loss over vocabulary chunks (ModelOptions.vocab_loss_chunk) against the plain
[B, M, V] logits: the same loss, accuracy and gradients on a tiny BERT and a tiny ModernBERT (tied and
untied decoders), the same params; the default's choice (chunks from a 65,536-entry vocabulary up) and the
compiled step's memory at V = 131,072."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert import BertConfig, BertForMaskedLM, BertForPreTraining
from jaxbert.engine.optim import make_optimizer
from jaxbert.engine.recipe import ComputeSection, RecipeError
from jaxbert.engine.step import TrainState
from jaxbert.model.classes import build_model
from jaxbert.model.modernbert import ModernBertConfig
from jaxbert.model.options import ModelOptions
from jaxbert.model.vocab_loss import DEFAULT_CHUNK, VocabProjection, deferred_vocab_logits
from jaxbert.train.mlm import MLM, eval_step, train_step
from jaxbert.train.recipe import OptimSection
from jaxbert.train.sources import SyntheticMLM

V = 1000  # 2 x 384 + 232: the last chunk shorter
CHUNK = 384
OPT = OptimSection(learning_rate=1e-3, warmup_steps=0, schedule="constant")


def _bert(V=V, **kw):
    return BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw)


def _modernbert(V=V, **kw):
    return ModernBertConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=2, global_attn_every_n_layers=2, local_attention=8,
                            max_position_embeddings=32, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                            bos_token_id=2, eos_token_id=3, **kw)


MODELS = {
    "bert-tied": ("BertForMaskedLM", _bert),
    "bert-untied": ("BertForMaskedLM", lambda: _bert(tie_word_embeddings=False)),
    "bert-pretraining": ("BertForPreTraining", _bert),
    "modernbert-tied": ("ModernBertForMaskedLM", _modernbert),
    "modernbert-untied": ("ModernBertForMaskedLM", lambda: _modernbert(tie_word_embeddings=False)),
    "modernbert-tied-nobias": ("ModernBertForMaskedLM", lambda: _modernbert(decoder_bias=False)),
}


def _batch(vocab, n=8, length=16, accum=1, seed=0, nsp=False):
    b = next(SyntheticMLM(vocab, n * accum, length, seed=seed, mask_rate=0.3, nsp=nsp))
    return {k: jnp.asarray(v.reshape(accum, n, *v.shape[1:])) for k, v in b.items()}


def _labels_the_model_predicts(model, params, mb):
    """Half the masked labels set to the plain path's argmax, so that the accuracy counts something."""
    out = model.apply({"params": params}, mb["input_ids"], mb["token_type_ids"],
                      attention_mask=mb["attention_mask"], masked_positions=mb["masked_positions"])
    guess = jnp.argmax(out.logits, -1)
    keep = (jnp.arange(guess.shape[1]) % 2 == 0)[None]
    return dict(mb, masked_labels=jnp.where(keep, guess, mb["masked_labels"]).astype(jnp.int32))


def _setup(name, dtype=jnp.float32, nsp=False):
    class_name, config = MODELS[name]
    cfg = config()
    batch = _batch(cfg.vocab_size, nsp=nsp)
    models = {chunk: build_model(class_name, cfg, ModelOptions(dtype=dtype, vocab_loss_chunk=chunk))
              for chunk in (0, CHUNK)}
    ids = batch["input_ids"][0, :1]
    params = models[0].init(jax.random.PRNGKey(0), ids, jnp.zeros_like(ids))["params"]
    mb = _labels_the_model_predicts(models[0], params, {k: v[0] for k, v in batch.items()})
    return models, params, mb


def _grads_and_sums(model, params, mb):
    def objective(p):
        sums = MLM.sums(MLM.forward(p, model.apply, mb, jax.random.PRNGKey(1), True), mb)
        return sums["mlm_loss_sum"] + sums.get("nsp_loss_sum", 0.0), sums
    return jax.jit(jax.grad(objective, has_aux=True))(params)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_chunked_loss_its_accuracy_and_gradients_equal_the_plain_path(name):
    models, params, mb = _setup(name, nsp=name == "bert-pretraining")
    g0, s0 = _grads_and_sums(models[0], params, mb)
    g1, s1 = _grads_and_sums(models[CHUNK], params, mb)
    assert set(s0) == set(s1)
    assert float(s0["mlm_correct"]) >= 0.4 * float(s0["mlm_weight"]) > 0  # the accuracy counts something
    assert float(s1["mlm_correct"]) == float(s0["mlm_correct"]) and float(s1["mlm_weight"]) == float(s0["mlm_weight"])
    for key in s0:
        np.testing.assert_allclose(float(s1[key]), float(s0[key]), rtol=1e-6, err_msg=key)
    assert jax.tree_util.tree_structure(g0) == jax.tree_util.tree_structure(g1)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g0), jax.tree_util.tree_leaves(g1)):
        # float32 rounding at the scale of each gradient array (a sum of many terms can cancel to a small one)
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max() + 1e-7, (jax.tree_util.keystr(path), np.abs(a - b).max())


@pytest.mark.parametrize("name", ["bert-tied", "modernbert-untied"])
def test_the_train_and_eval_steps_metrics_and_update_equal_the_plain_path(name):
    models, params, mb = _setup(name)
    batch = {k: v[None] for k, v in mb.items()}
    out = {}
    for chunk, model in models.items():
        tx, schedule = make_optimizer(OPT, 10)
        state = TrainState.create(model.apply, params, tx, schedule)
        new, metrics = jax.jit(train_step)(state, batch, jax.random.PRNGKey(0))
        out[chunk] = (new.params, jax.device_get(metrics), jax.device_get(eval_step(params, mb, model.apply)))
    (p0, m0, e0), (p1, m1, e1) = out[0], out[CHUNK]
    for key in m0:
        np.testing.assert_allclose(m1[key], m0[key], rtol=1e-5, err_msg=key)
    for key in e0:
        np.testing.assert_allclose(e1[key], e0[key], rtol=1e-6, err_msg=key)
    assert m1["mlm_correct"] == m0["mlm_correct"] and e1["mlm_correct"] == e0["mlm_correct"]
    for a, b in zip(jax.tree_util.tree_leaves(p0), jax.tree_util.tree_leaves(p1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("name", ["bert-tied", "modernbert-tied"])
def test_bfloat16_compute_chunked_is_the_plain_path_within_bf16(name):
    models, params, mb = _setup(name, dtype=jnp.bfloat16)
    g0, s0 = _grads_and_sums(models[0], params, mb)
    g1, s1 = _grads_and_sums(models[CHUNK], params, mb)
    np.testing.assert_allclose(float(s1["mlm_loss_sum"]), float(s0["mlm_loss_sum"]), rtol=1e-2)
    assert abs(float(s1["mlm_correct"]) - float(s0["mlm_correct"])) <= 0.05 * float(s0["mlm_weight"])
    for a, b in zip(jax.tree_util.tree_leaves(g0), jax.tree_util.tree_leaves(g1)):
        assert a.dtype == b.dtype == jnp.float32  # float32 master params
        a, b = np.asarray(a), np.asarray(b)
        assert np.abs(a - b).max() <= 0.05 * np.abs(a).max() + 1e-4


@pytest.mark.parametrize("name", ["bert-untied", "modernbert-untied", "modernbert-tied"])
def test_the_head_has_the_same_params_chunked_or_not(name):
    """Init inside the MLM step's context with the chunked choice builds the params the plain head builds:
    the same names, shapes and values (the untied decoder's kernel through DenseWeights)."""
    class_name, config = MODELS[name]
    cfg = config()
    ids = jnp.ones((1, 8), jnp.int32)
    plain = build_model(class_name, cfg, ModelOptions(vocab_loss_chunk=0)).init(jax.random.PRNGKey(0), ids, ids)
    with deferred_vocab_logits():
        model = build_model(class_name, cfg, ModelOptions(vocab_loss_chunk=CHUNK))
        chunked = model.init(jax.random.PRNGKey(0), ids, ids)
        out = model.apply(chunked, ids, ids)
    assert isinstance(out.logits, VocabProjection)
    assert jax.tree_util.tree_structure(plain) == jax.tree_util.tree_structure(chunked)
    for a, b in zip(jax.tree_util.tree_leaves(plain), jax.tree_util.tree_leaves(chunked)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # outside the context the same model returns logits, the projection's product
    logits = model.apply(chunked, ids, ids).logits
    np.testing.assert_allclose(np.asarray(logits), np.asarray(out.logits.logits()), rtol=1e-5, atol=1e-6)


def _tiny_state(vocab, chunk):
    model = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32, max_position_embeddings=64),
                            ModelOptions(vocab_loss_chunk=chunk))
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32),
                                               jnp.zeros((1, 8), jnp.int32))["params"])
    tx, schedule = make_optimizer(OPT, 10)
    return model, jax.eval_shape(lambda p: TrainState.create(model.apply, p, tx, schedule), params)


def test_the_default_takes_chunks_from_65536_and_keeps_the_plain_path_below():
    ids = jnp.zeros((1, 8), jnp.int32)
    pos = jnp.zeros((1, 3), jnp.int32)
    for vocab, chunked in ((4096, False), (65535, False), (65536, True), (131072, True)):
        model, state = _tiny_state(vocab, None)
        with deferred_vocab_logits():
            out = jax.eval_shape(lambda p: model.apply({"params": p}, ids, ids, masked_positions=pos), state.params)
        assert isinstance(out.logits, VocabProjection) == chunked, vocab
        if chunked:
            assert out.logits.chunk == DEFAULT_CHUNK and out.logits.shape == (1, 3, vocab)
        # outside the step's context the model returns logits whatever the option
        out = jax.eval_shape(lambda p: model.apply({"params": p}, ids, ids, masked_positions=pos), state.params)
        assert out.logits.shape == (1, 3, vocab) and not isinstance(out.logits, VocabProjection)


def test_the_compiled_step_at_131072_holds_no_masked_tokens_by_vocabulary_array():
    """B = 8 rows of 64 tokens, M = 32 masked slots, H = 16: the plain step's [B, M, V] float32 logits are
    128 MiB (and it holds more than one such array); the chunked step's temporaries are the [B x M, 8,192]
    chunks, the encoder's and the optimizer's."""
    vocab, B, L, M = 131072, 8, 64, 32
    batch = {"input_ids": jax.ShapeDtypeStruct((1, B, L), jnp.int32),
             "token_type_ids": jax.ShapeDtypeStruct((1, B, L), jnp.int32),
             "attention_mask": jax.ShapeDtypeStruct((1, B, L), jnp.int32),
             "masked_positions": jax.ShapeDtypeStruct((1, B, M), jnp.int32),
             "masked_labels": jax.ShapeDtypeStruct((1, B, M), jnp.int32),
             "masked_weights": jax.ShapeDtypeStruct((1, B, M), jnp.float32)}
    temp = {}
    for chunk in (None, 0):
        _, state = _tiny_state(vocab, chunk)
        compiled = jax.jit(train_step).lower(state, batch, jax.random.PRNGKey(0)).compile()
        temp[chunk] = compiled.memory_analysis().temp_size_in_bytes
        if chunk is None:
            assert "while" in compiled.as_text()  # the chunks' scan
    logits = B * M * vocab * 4
    print(f"temp bytes at V={vocab}, B={B}, M={M}, H=16: plain {temp[0]:,}, chunked {temp[None]:,} "
          f"(B*M*V*4 = {logits:,})")
    assert temp[0] >= logits
    assert temp[None] < logits / 4, temp


def test_the_recipe_key():
    assert ComputeSection().options().vocab_loss_chunk is None
    assert ComputeSection(vocab_loss_chunk=0).options().vocab_loss_chunk == 0
    assert ComputeSection(vocab_loss_chunk=4096).options().vocab_loss_chunk == 4096
    with pytest.raises(RecipeError, match="vocab_loss_chunk"):
        ComputeSection(vocab_loss_chunk=-1).check()
    with pytest.raises(ValueError, match="vocab_loss_chunk"):
        ModelOptions(vocab_loss_chunk=True)
