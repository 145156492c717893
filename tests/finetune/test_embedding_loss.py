"""The embedding kind's loss and gradients on one batch against sentence-transformers' losses.

One tiny random BERT (all-MiniLM-L6-v2's WordPiece tokenizer, no download) is saved as a transformers
directory; sentence-transformers builds Transformer + Pooling(mean) + Normalize on it, jaxbert reads the
same directory. Both take the same texts with two hard-negative columns: MultipleNegativesRankingLoss
(fixed and learned scale), its symmetric variant, CachedMultipleNegativesRankingLoss (GradCache on
both sides) and MatryoshkaLoss, in float32: loss within 1e-5 relative, every gradient within 1e-4.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("sentence_transformers")

from jaxbert import from_pretrained, params_to_state_dict
from jaxbert.finetune.kinds.embedding.step import LOGIT_KEY, by_column, embedder, loss_and_grads
from jaxbert.packaged import minilm_folder

ANCHORS = ["how do cats sleep", "what is the capital of france", "python list sort", "rain in spain"]
POSITIVES = ["cats sleep up to sixteen hours a day curled in warm places", "paris is the capital of france",
             "sorted(xs) returns a new list; xs.sort() sorts in place", "the rain in spain falls mainly on the plain"]
NEGATIVES = [["dogs bark at night", "berlin is in germany", "java arrays are fixed", "snow in norway"],
             ["cats are mammals", "lyon is a french city", "a list holds items", "spain has sun"]]
COLUMNS = [ANCHORS, POSITIVES, *NEGATIVES]
HIDDEN = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import transformers
    folder = tmp_path_factory.mktemp("tiny-embedder")
    src = minilm_folder()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(f"{src}/{name}", folder / name)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    return folder


def _st_model(folder):
    from sentence_transformers import SentenceTransformer, models
    word = models.Transformer(str(folder), max_seq_length=48)
    return SentenceTransformer(modules=[word, models.Pooling(HIDDEN, "mean"), models.Normalize()], device="cpu")


def _features(model):
    return [model.tokenize(texts) for texts in COLUMNS]


def _batch(features, common: bool = False) -> dict:
    """ST's per-column features as jaxbert's batch: each column at its own length, as ST pads it (the
    trainer's layout); common: every column padded to the longest of all first (one encoder call)."""
    length = max(f["input_ids"].shape[1] for f in features)
    arrays = {}
    for key in ("input_ids", "attention_mask"):
        cols = [np.pad(f[key].numpy(), ((0, 0), (0, length - f[key].shape[1]))) for f in features]
        arrays[key] = jnp.asarray(np.stack(cols, 1), jnp.int32)
    arrays["token_type_ids"] = jnp.zeros_like(arrays["input_ids"])
    arrays["valid"] = jnp.ones(arrays["input_ids"].shape[0], jnp.int32)
    return by_column(arrays, None if common else [f["input_ids"].shape[1] for f in features])


def _torch_step(model, loss_fn):
    model.zero_grad()
    features = _features(model)
    loss = loss_fn(features, None)
    loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in model[0].auto_model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


@pytest.fixture(scope="module")
def sides(model_dir):
    model = _st_model(model_dir)
    module, params = from_pretrained(str(model_dir), "BertModel")
    embed = embedder(module.apply, "mean")
    batch = _batch(_features(model))
    return model, module, params, embed, batch


def _check(loss_j, grads_j, module, loss_t, grads_t):
    assert abs(float(loss_j) - loss_t) <= 1e-5 * abs(loss_t), (float(loss_j), loss_t)
    sd = params_to_state_dict(jax.tree_util.tree_map(np.asarray, grads_j), module.config, "BertModel")
    compared = 0
    for name, g in grads_t.items():
        np.testing.assert_allclose(sd[name], g, atol=1e-4, rtol=0, err_msg=name)
        compared += 1
    assert compared >= 30  # every encoder tensor, not a handful
    # the embedding rows of the batch's tokens moved: the comparison is not between zeros
    assert np.abs(grads_t["embeddings.word_embeddings.weight"]).max() > 1e-3


def _jax(sides, **kw):
    _, _, params, embed, batch = sides
    return loss_and_grads(embed, params, batch, jax.random.key(0), deterministic=True, **kw)


def test_mnrl_with_hard_negatives_matches_sentence_transformers(sides):
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    model, module = sides[0], sides[1]
    loss_t, grads_t = _torch_step(model, MultipleNegativesRankingLoss(model, scale=20.0))
    loss_j, grads_j = _jax(sides, temperature=0.05)
    _check(loss_j, grads_j, module, loss_t, grads_t)
    # the hard negatives count: the same batch without them has another loss
    without, _ = _torch_step(model, lambda f, labels: MultipleNegativesRankingLoss(model, scale=20.0)(f[:2], labels))
    assert abs(without - loss_t) > 1e-3
    # each column at its own length (the trainer's layout) against every column padded to the longest: the
    # same embeddings (the loss and its gradients are functions of them)
    _, _, params, embed, batch = sides
    assert len({v.shape[-1] for k, v in batch.items() if k.startswith("input_ids_")}) > 1
    own = embed(params, batch, jax.random.key(0), True)
    common = embed(params, _batch(_features(model), common=True), jax.random.key(0), True)
    assert own.shape == common.shape == (len(COLUMNS[0]), len(COLUMNS), HIDDEN)
    np.testing.assert_allclose(np.asarray(own), np.asarray(common), rtol=0, atol=2e-6)


def test_symmetric_and_learned_scale_match_sentence_transformers(sides):
    from sentence_transformers.losses import MultipleNegativesSymmetricRankingLoss
    model, module, params = sides[0], sides[1], sides[2]
    log_scale = np.float32(np.log(30.0))
    scale_t = torch.tensor(np.exp(log_scale), requires_grad=True)
    loss_fn = MultipleNegativesSymmetricRankingLoss(model, scale=1.0)
    loss_fn.scale = scale_t  # a learned scale: the loss multiplies by it
    loss_t, grads_t = _torch_step(model, loss_fn)
    _, _, _, embed, batch = sides
    loss_j, grads_j = loss_and_grads(embed, {**params, LOGIT_KEY: jnp.asarray(log_scale)}, batch, jax.random.key(0),
                                     temperature=1.0, symmetric=True, deterministic=True)
    g_log = float(grads_j.pop(LOGIT_KEY))
    _check(loss_j, grads_j, module, loss_t, grads_t)
    # d loss / d log(scale) = scale * d loss / d scale. It is a sum of (p - y) * logit over every pair, terms up
    # to the scale (30) in size that cancel to ~0.05: float32 rounding leaves ~1e-5 of it (7.5e-6 apart on
    # sentence-transformers 6.2, whose order of sums differs); a wrong chain rule or a missing direction is off
    # by a factor.
    assert g_log == pytest.approx(float(scale_t.grad) * float(scale_t.detach()), rel=1e-4, abs=3e-5)


def test_cached_mnrl_matches_gradcache(sides):
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss
    model, module = sides[0], sides[1]
    loss_t, grads_t = _torch_step(model, CachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=2,
                                                                            show_progress_bar=False))
    loss_j, grads_j = _jax(sides, temperature=0.05, chunks=2)
    _check(loss_j, grads_j, module, loss_t, grads_t)


def test_matryoshka_matches_sentence_transformers(sides):
    from sentence_transformers.losses import (
        MatryoshkaLoss,
        MultipleNegativesRankingLoss,
    )
    model, module = sides[0], sides[1]
    dims = (32, 16, 8)
    loss_t, grads_t = _torch_step(model, MatryoshkaLoss(model, MultipleNegativesRankingLoss(model, scale=20.0),
                                                        matryoshka_dims=list(dims)))
    loss_j, grads_j = _jax(sides, temperature=0.05, dims=dims)
    _check(loss_j, grads_j, module, loss_t, grads_t)
    full, _ = _jax(sides, temperature=0.05)
    assert float(loss_j) > float(full) + 1e-3  # the prefixes add their own terms
