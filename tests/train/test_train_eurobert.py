"""Pretraining a EuroBertForMaskedLM from the shipped recipes: the tiny demo trains a few steps on CPU (its BPE
and data built from the embedded corpus), exports a directory transformers 5 reads, and `jaxbert export` reads
its workdir; the EuroBERT-210m recipe says the numbers its comments cite."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.model.eurobert import EuroBertConfig
from jaxbert.train.recipe import load as load_recipe
from tests.helpers.runs import REPO, train_losses

RECIPES = REPO / "configs" / "train"


def test_the_tiny_eurobert_recipe_trains_a_few_steps_and_exports(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--config", str(RECIPES / "eurobert-tiny.yaml"), "--workdir", str(run),
                 "--set", "train.steps=20", "--set", "optim.warmup_steps=5", "--set", "outputs.plot=false",
                 "--set", "train.log_every=5", "--set", "train.eval_every=0"]) == 0
    out = capsys.readouterr().out
    assert "EuroBertForMaskedLM 3x128, vocab 4096" in out and "finished at step 20" in out
    losses = train_losses(run)
    assert len(losses) == 4 and np.isfinite(losses).all() and losses[-1] < losses[0] - 0.5, losses  # every 5 steps
    config = json.loads((run / "hf" / "config.json").read_text())
    assert config["model_type"] == "eurobert" and config["architectures"] == ["EuroBertForMaskedLM"]
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert json.loads((run / "hf" / "tokenizer_config.json").read_text())["model_input_names"] == \
        ["input_ids", "attention_mask"]
    # `jaxbert export` reads a EuroBERT workdir (its encoder is "model", as ModernBERT's: found by its table)
    assert main(["export", str(run), str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "model.safetensors").read_bytes() == (run / "hf" / "model.safetensors").read_bytes()
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "EuroBertForMaskedLM"):
        pytest.skip(f"transformers {transformers.__version__} has no EuroBERT (>= 5): the export's reload is not checked")
    import torch

    from jaxbert.convert import from_pretrained
    hf = transformers.EuroBertForMaskedLM.from_pretrained(run / "hf").eval()
    module, params = from_pretrained(run / "hf")
    ids = np.array([[2, 17, 230, 41, 4, 99, 3, 0]])
    mask = (ids != 0).astype(np.int64)
    with torch.no_grad():
        theirs = hf(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    ours = np.asarray(module.apply({"params": params}, ids, attention_mask=mask).logits)
    np.testing.assert_allclose(ours[mask == 1], theirs[mask == 1], atol=2e-5, rtol=0)


def test_the_eurobert_210m_recipe_says_its_sources_numbers():
    recipe = load_recipe(RECIPES / "eurobert-210m.yaml")
    cfg = recipe.model_config(128256)
    assert isinstance(cfg, EuroBertConfig) and recipe.model.model_class == "EuroBertForMaskedLM"
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.intermediate_size, cfg.vocab_size) == (768, 12, 12, 12, 3072, 128256)
    assert (cfg.theta, cfg.mask_token_id, cfg.tie_word_embeddings) == (10000.0, 128002, False)
    assert recipe.data.mask_rate == 0.5 and recipe.data.seq_len == 2048 and recipe.data.packing == "documents"
    o = recipe.optim
    assert (o.name, o.learning_rate, o.b1, o.b2, o.eps, o.weight_decay, o.clip_norm, o.schedule, o.warmup_ratio) == \
        ("adamw", 1e-4, 0.9, 0.95, 1e-5, 0.1, 1.0, "constant", 0.01)
    assert recipe.model.attention_impl == "auto" and recipe.model.scan_layers
    demo = load_recipe(RECIPES / "eurobert-tiny.yaml")
    assert demo.model_config(4096).groups == 2 and demo.data.mask_rate == 0.5
