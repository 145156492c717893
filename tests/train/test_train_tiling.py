"""A larger model initialised from a smaller one by centre tiling (ModernBERT-large from base):
the tiling by hand, fused projections block by block, the layer map, and a transformers ModernBERT
directory tiled into a wider, deeper model through warmstart.merge as `jaxbert train` calls it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.families import family_of
from jaxbert.model.heads import build_model
from jaxbert.model.modernbert import ModernBertConfig
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten
from jaxbert.train import warmstart
from jaxbert.train.recipe import RecipeError
from jaxbert.train.recipe import load as load_recipe
from jaxbert.train.tiling import centre_tile, source_layer
from tests.helpers.modernbert import TINY, tiny_hf
from tests.helpers.runs import write_recipe


def test_centre_tile_by_hand():
    src = np.arange(6).reshape(2, 3)
    out = centre_tile(src, (4, 5))
    # axis 0 grows 2 -> 4 (offset 1): rows 1, 0, 1, 0 of src; axis 1 grows 3 -> 5 (offset 1): columns 2, 0, 1, 2, 0
    np.testing.assert_array_equal(out, [[5, 3, 4, 5, 3],
                                        [2, 0, 1, 2, 0],
                                        [5, 3, 4, 5, 3],
                                        [2, 0, 1, 2, 0]])
    np.testing.assert_array_equal(out[1:3, 1:4], src)  # the source sits at the centre
    np.testing.assert_array_equal(centre_tile(np.arange(5), (3,)), [1, 2, 3])  # a shrinking axis: centre crop


def test_a_fused_projection_is_tiled_block_by_block():
    # [in 2, out 3 x 2] (q | k | v) -> [in 4, out 3 x 4]: each block's centre is its own source block
    src = np.arange(12.0).reshape(2, 6)
    out = centre_tile(src, (4, 12), parts=3)
    for j in range(3):
        np.testing.assert_array_equal(out[1:3, 4 * j + 1:4 * j + 3], src[:, 2 * j:2 * j + 2])
    # unfused, q's centre would hold v's columns (offset 3 of 6 -> 12: columns 1, 2 read 4, 5)
    np.testing.assert_array_equal(centre_tile(src, (4, 12))[1:3, 1:3], src[:, 4:6])


def test_extra_layers_repeat_the_top_of_the_stack():
    # ModernBERT-large (28 layers) from base (22): 0..21 as they are, 22..27 from 16..21
    assert [source_layer(i, 28, 22) for i in range(28)] == list(range(22)) + list(range(16, 22))
    assert [source_layer(i, 5, 2) for i in range(5)] == [0, 1, 1, 0, 1]


def test_a_transformers_modernbert_tiles_into_a_wider_deeper_model(tmp_path):
    hf = tiny_hf("ModernBertForMaskedLM")  # hidden 32, 4 heads of 8, intermediate 40, 3 layers
    hf.save_pretrained(tmp_path / "base")
    # 'large': hidden 48 (6 heads of 8, offset 8 = one head), intermediate 60, 6 layers (every 2nd global)
    cfg = ModernBertConfig(**dict(TINY, hidden_size=48, num_attention_heads=6, intermediate_size=60,
                                  num_hidden_layers=6))
    model = build_model("ModernBertForMaskedLM", cfg, ModelOptions())
    ids = jnp.ones((1, 8), jnp.int32)
    fresh = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    loaded = warmstart.load_source_params(str(tmp_path / "base"), "ModernBertForMaskedLM")
    with pytest.raises(Exception, match="shape"):  # without tiling: a shape mismatch, named
        warmstart.merge(fresh, loaded, False, log=lambda m: None)
    lines = []
    merged = flatten(warmstart.merge(fresh, loaded, False, log=lines.append, tile=True,
                                     fused_outputs=family_of(cfg).fused_outputs), sep="/")
    src = flatten(loaded, sep="/")
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    emb = merged["model/embeddings/tok_embeddings/embedding"]
    assert emb.shape == (100, 48)
    np.testing.assert_array_equal(emb[:, 8:40], sd["model.embeddings.tok_embeddings.weight"])
    # Wqkv [48, 3 x 48]: q, k and v each hold the source's at their centre; layer 4 is source layer 1
    for layer, source in ((0, 0), (2, 2), (4, 1), (5, 2)):
        wqkv = merged[f"model/layers/{layer}/attn/Wqkv/kernel"]
        assert wqkv.shape == (48, 144)
        torch_w = sd[f"model.layers.{source}.attn.Wqkv.weight"].T  # [32, 96]
        for j in range(3):
            np.testing.assert_array_equal(wqkv[8:40, 48 * j + 8:48 * j + 40], torch_w[:, 32 * j:32 * j + 32])
        wi = merged[f"model/layers/{layer}/mlp/Wi/kernel"]  # GeGLU input | gate, 2 x 60 from 2 x 40
        assert wi.shape == (48, 120)
        np.testing.assert_array_equal(wi[8:40, 10:50], src[f"model/layers/{source}/mlp/Wi/kernel"][:, :40])
        np.testing.assert_array_equal(wi[8:40, 70:110], src[f"model/layers/{source}/mlp/Wi/kernel"][:, 40:])
    np.testing.assert_array_equal(merged["model/final_norm/scale"][8:40], sd["model.final_norm.weight"])
    # layer 0 of the source has no attention norm (ModernBERT's first layer): layer 3, from source
    # layer 0 too, keeps its fresh one, and the log says so
    assert "model/layers/3/attn_norm/scale" in lines[0]
    np.testing.assert_array_equal(merged["model/layers/3/attn_norm/scale"],
                                  flatten(fresh, sep="/")["model/layers/3/attn_norm/scale"])


def test_init_tile_needs_init_from(tmp_path):
    with pytest.raises(RecipeError, match="model.init_tile: true tiles the params of model.init_from"):
        load_recipe(write_recipe(tmp_path / "r.yaml", model={"preset": "bert-tiny", "init_tile": True}))
