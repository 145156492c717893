import json

import pytest

from jaxbert import BertConfig, ConfigError, preset
from jaxbert.model.configs import PRESETS


def test_default_is_bert_base_uncased():
    cfg = BertConfig()
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.intermediate_size, cfg.max_position_embeddings) == (30522, 768, 12, 12, 3072, 512)
    assert cfg.hidden_act == "gelu" and cfg.layer_norm_eps == 1e-12 and cfg.num_labels == 2
    assert cfg == preset("bert-base-uncased").replace(extra={})


def test_json_round_trip_keeps_unknown_keys(tmp_path):
    data = preset("bert-tiny").to_dict()
    data.update(architectures=["BertForPreTraining"], torch_dtype="float32", my_key={"a": [1, 2]},
                id2label={"0": "neg", "1": "neu", "2": "pos"})
    (tmp_path / "config.json").write_text(json.dumps(data))
    cfg = BertConfig.from_pretrained(tmp_path)
    assert cfg.num_labels == 3 and cfg.label2id == {"neg": 0, "neu": 1, "pos": 2}
    assert cfg.architectures == ["BertForPreTraining"]
    cfg.to_json_file(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["my_key"] == {"a": [1, 2]} and again["torch_dtype"] == "float32"
    assert BertConfig.from_json_file(tmp_path / "again.json") == cfg


def test_transformers_reads_our_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = preset("bert-small").replace(num_labels=5, position_embedding_type="relative_key")
    cfg.to_json_file(tmp_path / "config.json")
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    assert (hf.hidden_size, hf.num_hidden_layers, hf.num_labels, hf.position_embedding_type) == (
        512, 4, 5, "relative_key")
    assert BertConfig.from_dict(hf.to_dict()).replace(extra={}) == cfg.replace(extra={})


@pytest.mark.parametrize("changes, field", [
    (dict(hidden_size=100, num_attention_heads=12), "hidden_size"),
    (dict(hidden_act="gelu_magic"), "hidden_act"),
    (dict(position_embedding_type="rotary"), "position_embedding_type"),
    (dict(num_hidden_layers=0), "num_hidden_layers"),
    (dict(vocab_size=-3), "vocab_size"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
    (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob"),
    (dict(classifier_dropout=1.5), "classifier_dropout"),
])
def test_invalid_values_name_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        BertConfig(**changes)


def test_bad_file_is_named(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 30, "num_attention_heads": 4}')
    with pytest.raises(ConfigError, match="config.json.*hidden_size"):
        BertConfig.from_json_file(bad)
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="config.json"):
        BertConfig.from_json_file(bad)


def test_presets():
    shapes = {name: (preset(name).num_hidden_layers, preset(name).hidden_size) for name in PRESETS}
    assert shapes == {
        "bert-tiny": (2, 128), "bert-mini": (4, 256), "bert-small": (4, 512), "bert-medium": (8, 512),
        "bert-base-uncased": (12, 768), "bert-base-cased": (12, 768), "bert-large-uncased": (24, 1024)}
    assert preset("bert-base-cased").vocab_size == 28996
    assert hash(preset("bert-tiny")) == hash(preset("bert-tiny"))
