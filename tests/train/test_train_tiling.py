"""A larger model initialised from a smaller one by centre tiling (ModernBERT-large from base):
the tiling by hand, fused projections block by block, the layer map, and a transformers ModernBERT
directory tiled into a wider, deeper model through warmstart.merge as `jaxbert train` calls it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.families import family_of
from jaxbert.model.classes import build_model
from jaxbert.model.modernbert import ModernBertConfig
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten
from jaxbert.train import warmstart
from jaxbert.train.recipe import RecipeError
from jaxbert.train.recipe import load as load_recipe
from jaxbert.cli.main import main
from jaxbert.model.bert.config import BertConfig
from jaxbert.train.tiling import TilingError, centre_tile, source_layer
from tests.helpers.hf_models import tiny_hf_model
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
    with pytest.raises(ValueError, match="larger"):  # a shrinking axis is refused, never cropped
        centre_tile(np.arange(5), (3,))


def test_a_table_axis_keeps_each_row_at_its_index():
    # [rows 3, features 2] -> [rows 5, features 4]: row i stays row i (features centre-tiled, offset 1);
    # rows 3 and 4 are new and come from fill
    src = np.arange(6.0).reshape(3, 2)
    fill = -np.ones((5, 4))
    out = centre_tile(src, (5, 4), tables=(0,), fill=fill)
    np.testing.assert_array_equal(out[:3], [[1, 0, 1, 0], [3, 2, 3, 2], [5, 4, 5, 4]])
    np.testing.assert_array_equal(out[3:], fill[3:])


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


def _bert(layers: int, hidden: int, positions: int, vocab: int) -> dict:
    return dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=4, intermediate_size=2 * hidden,
                max_position_embeddings=positions, vocab_size=vocab)


def test_a_bert_tiles_into_a_wider_deeper_one_with_tables_row_for_row(tmp_path):
    # 1x32 (64 positions, vocab 99) -> 2x64 (128 positions, vocab 104): hidden offset (64 - 32) // 2 = 16
    hf = tiny_hf_model("BertForMaskedLM", **_bert(1, 32, 64, 99))
    hf.save_pretrained(tmp_path / "small")
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    model = build_model("BertForMaskedLM", BertConfig(**_bert(2, 64, 128, 104)), ModelOptions())
    ids = jnp.ones((1, 8), jnp.int32)
    fresh = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    loaded = warmstart.load_source_params(str(tmp_path / "small"), "BertForMaskedLM")
    lines = []
    merged = flatten(warmstart.merge(fresh, loaded, False, log=lines.append, tile=True), sep="/")
    before = flatten(fresh, sep="/")
    pos = merged["bert/embeddings/position_embeddings/embedding"]
    # position i of the larger model is the source's position i (centre tiling the rows made
    # position 0 the source's 32), its features centre-tiled; positions 64..127 keep their fresh rows
    np.testing.assert_array_equal(pos[:64, 16:48], sd["bert.embeddings.position_embeddings.weight"])
    np.testing.assert_array_equal(pos[:64, :16], sd["bert.embeddings.position_embeddings.weight"][:, 16:])
    np.testing.assert_array_equal(pos[64:], before["bert/embeddings/position_embeddings/embedding"][64:])
    words = merged["bert/embeddings/word_embeddings/embedding"]
    np.testing.assert_array_equal(words[:99, 16:48], sd["bert.embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(words[99:], before["bert/embeddings/word_embeddings/embedding"][99:])
    np.testing.assert_array_equal(merged["bert/embeddings/token_type_embeddings/embedding"][:, 16:48],
                                  sd["bert.embeddings.token_type_embeddings.weight"])
    bias = merged["cls/predictions/bias"]  # the decoder's vocabulary axis: token i's bias stays token i's
    np.testing.assert_array_equal(bias[:99], sd["cls.predictions.bias"])
    np.testing.assert_array_equal(bias[99:], before["cls/predictions/bias"][99:])
    # layer 1 repeats the source's only layer
    for layer in (0, 1):
        np.testing.assert_array_equal(merged[f"bert/encoder/layer/{layer}/attention/self/query/kernel"][16:48, 16:48],
                                      sd["bert.encoder.layer.0.attention.self.query.weight"].T)
    new = "\n".join(lines)
    assert "position_embeddings/embedding: rows 64..127 of axis 0 are new" in new
    assert "word_embeddings/embedding: rows 99..103 of axis 0 are new" in new
    assert "cls/predictions/bias: rows 99..103" in new


def test_a_larger_source_is_refused_not_cropped(tmp_path, capsys):
    # 2x64 (128 positions) into 1x32 (64 positions): every axis and the depth would be cropped
    hf = tiny_hf_model("BertForMaskedLM", **_bert(2, 64, 128, 99))
    hf.save_pretrained(tmp_path / "large")
    model = build_model("BertForMaskedLM", BertConfig(**_bert(2, 32, 64, 99)), ModelOptions())
    ids = jnp.ones((1, 8), jnp.int32)
    fresh = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    loaded = warmstart.load_source_params(str(tmp_path / "large"), "BertForMaskedLM")
    with pytest.raises(TilingError, match=r"init_tile: param bert/\S+ of the source has shape \((64|128),[^)]*\), "
                                           r"larger than the model's \((32|64),[^)]*\); .* never crops"):
        warmstart.merge(fresh, loaded, False, log=lambda m: None, tile=True)
    # as `jaxbert train` runs it: one line, exit 2, no step taken (the depth is named first)
    recipe = write_recipe(tmp_path / "r.yaml", model={"preset": "bert-tiny", "config": _bert(1, 32, 64, 99),
                                                      "init_from": str(tmp_path / "large"), "init_tile": True},
                          train={"steps": 2})
    capsys.readouterr()
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "init_tile: the source has 2 layers in bert/encoder/layer, the model 1" in err[0], err
    assert not list((tmp_path / "run").glob("checkpoints/*"))
