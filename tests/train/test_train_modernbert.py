"""Pretraining a ModernBertForMaskedLM from a recipe: the MLM objective on the synthetic source, a
ModernBERT config built by the recipe (model.preset: modernbert), StableAdamW, the loss falling,
an exact resume, and the shipped ModernBERT recipes checked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.engine.optim import OptimSection, make_optimizer
from jaxbert.model.modernbert import ModernBertConfig
from jaxbert.train.recipe import RecipeError
from jaxbert.train.recipe import load as load_recipe
from tests.helpers.runs import REPO, final_params, train_losses, write_recipe

# TINY's run with a 2-layer ModernBERT (layer 0 global, layer 1 sliding with a window of 8 = +-4
# tokens, shorter than the 16-token rows) and StableAdamW (update clipping, no gradient clipping).
MODEL = {"preset": "modernbert", "model_class": "ModernBertForMaskedLM", "config": {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48,
    "vocab_size": 64, "max_position_embeddings": 32, "global_attn_every_n_layers": 2, "local_attention": 8,
    "pad_token_id": 0, "cls_token_id": 2, "sep_token_id": 3, "bos_token_id": 2, "eos_token_id": 3}}
OPTIM = {"name": "stable_adamw", "learning_rate": 1e-2, "b2": 0.98, "eps": 1e-6, "weight_decay": 1e-5,
         "schedule": "wsd", "decay_fraction": 0.25, "warmup_steps": 3, "clip_norm": None}


def test_a_tiny_modernbert_pretrains_its_loss_falls_and_it_resumes_exactly(tmp_path, capsys, compile_cache):
    recipe = write_recipe(tmp_path / "mb.yaml", model=MODEL, optim=OPTIM,
                          data={"mask_rate": 0.3},
                          train={"steps": 36, "log_every": 1, "eval_every": 0},
                          checkpoint={"every_steps": 12, "keep": 5})
    whole = tmp_path / "whole"
    assert main(["train", "--config", str(recipe), "--workdir", str(whole)]) == 0
    out = capsys.readouterr().out
    assert "ModernBertForMaskedLM 2x32" in out and "finished at step 36" in out
    losses = train_losses(whole)
    assert len(losses) == 36 and np.isfinite(losses).all()
    assert losses[-6:].mean() < 0.8 * losses[:6].mean(), losses
    # stopped at 12, then resumed to the end: the same params, bit for bit
    parts = tmp_path / "parts"
    assert main(["train", "--config", str(recipe), "--workdir", str(parts), "--stop-after", "12"]) == 0
    assert main(["train", "--config", str(recipe), "--workdir", str(parts)]) == 0
    a, b = final_params(whole), final_params(parts)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    np.testing.assert_array_equal(train_losses(parts)[-24:], losses[-24:])
    # the run's config is a ModernBERT config, and its export loads back as the class it trained
    config = json.loads((whole / "hf" / "config.json").read_text()) if (whole / "hf").exists() else None
    if config is not None:
        assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]


def test_the_recipe_builds_the_family_config_and_names_a_field_it_does_not_have(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path / "mb.yaml", model=MODEL, optim=OPTIM))
    cfg = recipe.model_config(64)
    assert isinstance(cfg, ModernBertConfig) and cfg.layer_kinds == ("full_attention", "sliding_attention")
    bad = dict(MODEL, config=dict(MODEL["config"], type_vocab_size=1))
    with pytest.raises(RecipeError, match="model.config.type_vocab_size: not a ModernBertConfig field"):
        load_recipe(write_recipe(tmp_path / "bad.yaml", model=bad, optim=OPTIM))
    # packed documents are taken now (segment ids: per-document masks and rotary positions)
    packed = load_recipe(write_recipe(tmp_path / "packed.yaml", model=MODEL, optim=OPTIM,
                                      data={"source": "prepared", "packing": "documents"}))
    assert packed.data.packing == "documents"


def test_a_tiny_modernbert_pretrains_on_packed_documents(tmp_path, capsys):
    """As tests/train/test_train_packing.py for BERT, briefly: short documents packed into rows of 32
    with segment ids (several per row, longer than the sliding layer's +-4), 12 steps, the loss falls."""
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    sentences = ["the return statement leaves the function", "a for loop iterates over a list",
                 "the break statement ends the loop", "a dictionary maps keys to values"]
    rng = np.random.default_rng(0)
    docs = [" . ".join(rng.choice(sentences, int(rng.integers(1, 3)))) + " ." for _ in range(200)]
    (tmp_path / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    train_tokenizer([str(tmp_path / "corpus.txt")], 120, tmp_path / "tok")
    meta = prepare([str(tmp_path / "corpus.txt")], str(tmp_path / "tok"), str(tmp_path / "data"), max_length=32,
                   validation_fraction=0.1, progress=False, packing="documents")
    segments = np.load(sorted((tmp_path / "data").glob("train-*-segments.npy"))[0])
    assert segments.max() >= 2  # rows hold several documents
    model = dict(MODEL, config=dict(MODEL["config"], vocab_size=meta["vocab_size"]))  # the small corpus's
    recipe = write_recipe(tmp_path / "mb-packed.yaml", model=model, optim=OPTIM,
                          data={"source": "prepared", "dir": str(tmp_path / "data"), "seq_len": 32,
                                "mask_rate": 0.3, "packing": "documents"},
                          train={"steps": 12, "log_every": 1, "eval_every": 0, "eval_batches": 1},
                          checkpoint={"every_steps": 12, "keep": 1})
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 0
    assert "finished at step 12" in capsys.readouterr().out
    losses = train_losses(tmp_path / "run")
    assert len(losses) == 12 and np.isfinite(losses).all()
    assert losses[-3:].mean() < losses[:3].mean(), losses


@pytest.mark.parametrize("name", ["modernbert-tiny-demo", "modernbert-base", "modernbert-large"])
def test_the_shipped_modernbert_recipes_load(name):
    recipe = load_recipe(REPO / "configs" / "train" / f"{name}.yaml")
    cfg = recipe.model_config(None if name.endswith("demo") else 50368)
    assert isinstance(cfg, ModernBertConfig) and recipe.model.model_class == "ModernBertForMaskedLM"
    assert recipe.optim.name == "stable_adamw" and recipe.data.mask_rate == 0.3
    if not name.endswith("demo"):
        o = recipe.optim
        lr = 8e-4 if name == "modernbert-base" else 5e-4  # the paper's large rate
        # phase 1 is warmup then constant: the decay is phase 3's
        assert (o.learning_rate, o.b1, o.b2, o.eps, o.decoupled_weight_decay, o.schedule) == (lr, 0.9, 0.98, 1e-6, 1e-5,
                                                                                      "constant")
        assert o.clip_norm is None
        assert recipe.data.seq_len == 1024 and recipe.data.packing == "documents"
        assert cfg.global_rope_theta == 10000.0
        # large starts from base by centre tiling
        assert recipe.model.init_tile == (name == "modernbert-large")
        # batch-size warmup from 768 sequences over 50B tokens to the published batch (on 8 devices)
        t = recipe.train
        assert t.per_device_batch_size * 8 * t.accum_steps == (4608 if name == "modernbert-base" else 4928)
        assert (t.batch_warmup_start, t.batch_warmup_tokens) == (768, 50 * 10**9)


# The published phases 2 (context extension) and 3 (decay): (size, phase) -> lr, global batch, token budget
PHASES = {("base", 2): (3e-4, 576, 250e9), ("base", 3): (3e-4, 576, 50e9),
          ("large", 2): (5e-5, 616, 250e9), ("large", 3): (5e-5, 616, 50e9)}


@pytest.mark.parametrize("size,phase", list(PHASES))
def test_the_shipped_context_extension_and_decay_recipes_say_the_published_numbers(size, phase):
    recipe = load_recipe(REPO / "configs" / "train" / f"modernbert-{size}-phase{phase}.yaml")
    cfg = recipe.model_config(50368)
    lr, batch, tokens = PHASES[size, phase]
    assert (cfg.hidden_size, cfg.num_hidden_layers) == ((768, 22) if size == "base" else (1024, 28))
    assert (cfg.global_rope_theta, cfg.local_rope_theta) == (160000.0, 10000.0)
    assert recipe.data.seq_len == 8192 <= cfg.max_position_embeddings and recipe.data.mask_rate == 0.3
    assert recipe.model.attention_impl == "auto"  # not the dense scores, which do not fit at 8192
    o, t = recipe.optim, recipe.train
    assert o.learning_rate == lr and o.warmup_steps == 0 and o.name == "stable_adamw"
    # on the 8 devices the comments count: the published global batch
    assert t.per_device_batch_size * 8 * t.accum_steps == batch
    assert abs(t.steps * batch * 8192 / tokens - 1) < 0.02
    source = f"runs/modernbert-{size}" + ("" if phase == 2 else "-phase2")
    assert recipe.model.init_from == source and not recipe.model.init_tile
    if phase == 2:
        assert o.schedule == "constant"
    else:
        assert (o.schedule, o.decay_fraction, o.end_lr_factor) == ("1-sqrt", 1.0, 0.001)


def test_stable_adamw_is_adamw_until_a_tensor_spikes():
    import jax
    import jax.numpy as jnp
    kw = dict(learning_rate=8e-4, b2=0.98, eps=1e-6, clip_norm=None, schedule="constant")
    stable, _ = make_optimizer(OptimSection(name="stable_adamw", weight_decay=1e-5, **kw), 10)
    plain, _ = make_optimizer(OptimSection(name="adamw", weight_decay=1e-5 / 8e-4, **kw), 10)
    params = {"a": {"kernel": jnp.ones((3, 4))}, "b": {"kernel": jnp.ones((2,)), "bias": jnp.zeros(2)}}
    grads = jax.tree_util.tree_map(lambda x: jnp.full_like(x, 0.1), params)
    s1, s2 = stable.init(params), plain.init(params)
    u1, s1 = stable.update(grads, s1, params)
    u2, s2 = plain.update(grads, s2, params)
    for x, y in zip(jax.tree_util.tree_leaves(u1), jax.tree_util.tree_leaves(u2)):
        np.testing.assert_allclose(x, y, rtol=1e-6)  # first step: g^2 / v_hat = 1, nothing clipped
    spike = {"a": {"kernel": grads["a"]["kernel"] * 100}, "b": grads["b"]}
    u1, _ = stable.update(spike, s1, params)
    u2, _ = plain.update(spike, s2, params)
    # the spiking tensor's step (AdamW's direction and decay alike) shrinks by RMS(g^2 / v_hat) = 1.407
    v_hat = (0.98 * 0.02 * 0.1 ** 2 + 0.02 * 10.0 ** 2) / (1 - 0.98 ** 2)
    rms = np.sqrt(10.0 ** 2 / v_hat)
    assert rms > 1.4
    decay = 1e-5  # weight_decay / lr * lr on a kernel of ones: what plain AdamW adds unscaled
    np.testing.assert_allclose(u1["a"]["kernel"], (u2["a"]["kernel"]) / rms, rtol=1e-4, atol=decay)
    np.testing.assert_allclose(u1["b"]["kernel"], u2["b"]["kernel"], rtol=1e-6)
