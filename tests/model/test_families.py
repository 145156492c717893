"""The family registry: ModernBERT is reached through it, as BERT and RoBERTa are, by every place
that used to ask which family a config is (config.json, building, the key table, FLOPs, parity)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

import jaxbert
from jaxbert.convert import ConversionError
from jaxbert.convert.table import table_for
from jaxbert.model.bert.config import BertConfig, MODEL_TYPES
from jaxbert.model.configs import build_config, read_config
from jaxbert.model.families import FAMILIES, BY_MODEL_TYPE, family_of, family_of_class
from jaxbert.model.flops import non_embedding_params, train_flops_per_token
from jaxbert.model.classes import ALL_MODEL_CLASSES, build_model, dummy_inputs
from jaxbert.model.modernbert import CLASS_NAMES, ModernBertConfig, Table as ModernBertTable
from jaxbert.model.registry import spec_of
from jaxbert.model.bert.table import Table

SMALL = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
             local_attention=4, max_position_embeddings=32, pad_token_id=0)


def test_modernbert_is_a_registered_family_with_its_own_classes():
    family = FAMILIES["modernbert"]
    assert BY_MODEL_TYPE["modernbert"] is family and not family.builds_on
    assert family.class_names() == CLASS_NAMES
    assert all(family_of_class(n) is family for n in CLASS_NAMES)
    assert set(CLASS_NAMES) <= set(ALL_MODEL_CLASSES)
    # BertConfig reads the types of every family whose config class it is
    assert MODEL_TYPES == tuple(t for f in FAMILIES.values() if f.config_class is BertConfig for t in f.model_types)
    assert MODEL_TYPES == ("bert", "roberta", "xlm-roberta")  # the shipped families, spelt out


def test_build_model_and_dummy_inputs_make_every_modernbert_class():
    config = ModernBertConfig(**SMALL)
    for name in CLASS_NAMES:
        module = build_model(name, config)
        assert type(module).__name__ == name
        ids, types = dummy_inputs(name, 1, 6)
        assert ids.shape == ((1, 2, 6) if name.endswith("MultipleChoice") else (1, 6))
        params = module.init(jax.random.PRNGKey(0), ids, types)["params"]
        table = table_for(config, name)
        assert isinstance(table, ModernBertTable)
        assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == sum(
            int(jnp.prod(jnp.array(s))) for s in table.leaf_shapes.values())
        assert spec_of(name, config).family is FAMILIES["modernbert"]
    with pytest.raises(ValueError, match="takes no add_pooling_layer"):
        build_model("ModernBertModel", config, add_pooling_layer=False)


def test_a_class_of_another_architecture_is_refused_by_name_and_bert_families_mix():
    with pytest.raises(ConversionError, match="different architectures"):
        table_for(ModernBertConfig(**SMALL), "BertForMaskedLM")
    with pytest.raises(ConversionError, match="different architectures"):
        table_for(BertConfig(), "ModernBertForMaskedLM")
    roberta = BertConfig(model_type="roberta", pad_token_id=1, max_position_embeddings=40)
    assert isinstance(table_for(roberta, "BertForMaskedLM"), Table)  # a Bert* class takes the config's family
    assert not hasattr(jaxbert.convert.table, "Table")  # 0.3.0: BERT's table is jaxbert.model.bert.table's alone


def test_config_json_and_recipes_read_the_family_config_class(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(SMALL, model_type="modernbert")))
    assert isinstance(read_config(tmp_path), ModernBertConfig)
    assert isinstance(jaxbert.convert.pretrained.read_config(tmp_path / "config.json"), ModernBertConfig)
    assert isinstance(build_config("bert-tiny", {}), BertConfig)
    cfg = build_config("modernbert", {"hidden_size": 64, "num_attention_heads": 4, "pad_token_id": 0}, 100,
                       "ModernBertForMaskedLM")
    assert isinstance(cfg, ModernBertConfig) and cfg.vocab_size == 100 and cfg.num_hidden_layers == 22
    assert cfg.architectures == ("ModernBertForMaskedLM",)
    assert isinstance(build_config("bert-tiny", {"model_type": "modernbert"}), ModernBertConfig)  # ModernBERT-base
    with pytest.raises(jaxbert.errors.ConfigError, match="type_vocab_size: not a ModernBertConfig field"):
        build_config("modernbert", {"type_vocab_size": 2})


def test_flops_count_geglu_for_modernbert():
    c = ModernBertConfig(**SMALL)
    H, I = c.hidden_size, c.intermediate_size
    assert non_embedding_params(c) == c.num_hidden_layers * (4 * H * H + 3 * H * I)
    b = BertConfig()
    assert non_embedding_params(b) == 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    # every family counts its own (BERT too: no family falls back on another's count)
    assert all(f.non_embedding_params is not None and f.attended_positions is not None for f in FAMILIES.values())


def test_flops_count_only_the_window_on_sliding_layers():
    # 22 layers, every third global (0, 3, ..., 21: 8 global), window 128 (64 each side: 129 keys)
    c = ModernBertConfig(num_hidden_layers=22, global_attn_every_n_layers=3, local_attention=128)
    H, T = c.hidden_size, 1024
    dense = 6 * non_embedding_params(c) + 6 * (H * c.vocab_size + H * H)
    assert train_flops_per_token(c, T) == dense + 12 * H * (8 * T + 14 * 129)
    # shorter than the window: every layer attends all T, as BERT's L T
    assert train_flops_per_token(c, 100) == dense + 12 * H * 22 * 100
    b = BertConfig()
    assert train_flops_per_token(b, 128) == 6 * non_embedding_params(b) + 12 * 12 * 768 * 128 + 6 * (768 * b.vocab_size + 768 * 768)
