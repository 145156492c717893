"""BertConfig: the Hugging Face BERT config as a frozen dataclass (the config of BERT's family and of the
families on its modules: RoBERTa, XLM-RoBERTa).

It reads and writes transformers' ``config.json``. Keys that jaxbert does not
model (``architectures``, ``torch_dtype``, ``transformers_version``, ...) are
kept in ``extra`` so that a round trip loses nothing.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from jaxbert import fs
from jaxbert.errors import ConfigError
from jaxbert.model.contract import Family
from jaxbert.model.families import BY_MODEL_TYPE, family_of, root_class_name, root_of, supported
from jaxbert.model.hf_config import ACTIVATIONS, HFConfig, hf_config

POSITION_EMBEDDING_TYPES = ("absolute", "relative_key", "relative_key_query")
PRESETS = (
    "bert-tiny", "bert-mini", "bert-small", "bert-medium",
    "bert-base-uncased", "bert-base-cased", "bert-large-uncased",
)


def bert_model_types() -> tuple:
    """The model types BertConfig reads, now: those of every registered family whose config class it is (a
    family with a config class of its own, ModernBERT, is read by that class)."""
    return tuple(t for t, f in BY_MODEL_TYPE.items() if f.config_class is BertConfig)


def __getattr__(name: str):
    """MODEL_TYPES (and its older name SUPPORTED_MODEL_TYPES): bert_model_types() read at each access, so a
    family registered at run time is in it."""
    if name in ("MODEL_TYPES", "SUPPORTED_MODEL_TYPES"):
        return bert_model_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _refusal(model_type) -> str:
    """Why BertConfig does not read a model type: no family has it (the registered ones named), or another
    family's config class reads it."""
    family = BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        return f"model_type {model_type!r} is not supported; jaxbert reads {supported()}"
    return (f"model_type {model_type!r} is read by {family.config_class.__name__}, not BertConfig "
            f"(BertConfig reads {', '.join(map(repr, bert_model_types()))})")


@hf_config
class BertConfig(HFConfig):
    """transformers' BertConfig. ``BertConfig()`` is bert-base-uncased."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    use_cache: bool = True
    classifier_dropout: float | None = None
    is_decoder: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    model_type: str = "bert"
    # num_labels is derived from id2label when that is given; otherwise it
    # makes LABEL_0 .. LABEL_{n-1}, as transformers does.
    num_labels: int | None = None
    id2label: Mapping[int, str] | None = None
    label2id: Mapping[str, int] | None = None
    # Every other key of config.json, kept verbatim for the round trip.
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    FIELD_TYPES = {
        **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                         "intermediate_size", "max_position_embeddings", "type_vocab_size", "pad_token_id",
                         "num_labels"), int),
        **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range",
                         "layer_norm_eps", "classifier_dropout"), float),
        **dict.fromkeys(("use_cache", "is_decoder", "add_cross_attention", "tie_word_embeddings"), bool),
        "hidden_act": str, "position_embedding_type": str,
        "id2label": Mapping, "label2id": Mapping, "extra": Mapping,
    }
    OPTIONAL = frozenset({"pad_token_id", "num_labels", "classifier_dropout", "id2label", "label2id"})
    DEFAULT_MODEL_TYPE = "bert"

    def __post_init__(self):
        self._init_labels()
        self.validate()

    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act {self.hidden_act!r} is unknown; expected one of {ACTIVATIONS}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ConfigError(
                f"position_embedding_type {self.position_embedding_type!r} is unknown; "
                f"expected one of {POSITION_EMBEDDING_TYPES}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is None and name == "classifier_dropout":
                continue
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
        if not self.initializer_range > 0:
            raise ConfigError(f"initializer_range must be > 0, got {self.initializer_range!r}")
        if not self.layer_norm_eps > 0:
            raise ConfigError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.model_type not in bert_model_types():
            raise ConfigError(_refusal(self.model_type))
        self.family.check_config(self)
        self._check_labels()

    @property
    def family(self) -> Family:
        """The model family of the config's model_type (jaxbert.model.families)."""
        return family_of(self.model_type)

    def position_limit(self) -> int:
        """The longest sequence the position table holds (a family may start its positions later)."""
        return self.family.position_limit(self)

    @property
    def base_prefix(self) -> str:
        """Name of the encoder in the param tree and state dict: 'bert' or 'roberta'."""
        return self.family.prefix

    def class_name(self, name: str) -> str:
        """A class name in this config's family: 'BertForMaskedLM' -> 'RobertaForMaskedLM'."""
        family = self.family
        prefix = family.class_prefix(self.model_type)
        suffix = _suffix(name, family)
        if suffix not in family.heads:
            raise ConfigError(f"model_type {self.model_type!r} has no {prefix}{suffix}; its classes are "
                              f"{tuple(prefix + s for s in family.heads)}")
        return prefix + suffix

    @property
    def architectures(self) -> list[str] | None:
        return self.extra.get("architectures")

    # ---- config.json -------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BertConfig":
        model_type = data.get("model_type", "bert")
        if model_type not in bert_model_types():
            raise ConfigError(_refusal(model_type))
        return super().from_dict(data)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path) -> "BertConfig":
        """A preset name (``bert-base-uncased``), a config.json, or a directory holding one."""
        if str(name_or_path) in PRESETS:
            return preset(str(name_or_path))
        path = fs.as_path(name_or_path)  # a local path or a URL
        if path.is_dir():
            path = path / "config.json"
        return cls.from_json_file(path)




def _suffix(name: str, family: Family) -> str:
    """A class name less the class prefix of any family on the same modules ('XLMRobertaModel' -> 'Model')."""
    root = root_of(family)
    prefixes = {p for f in BY_MODEL_TYPE.values() if root_of(f) is root for p in f.class_prefixes.values()}
    prefix = max((p for p in prefixes if name.startswith(p)), key=len, default="")
    return name[len(prefix):]


def bert_class_name(name: str) -> str:
    """The BERT class a family's class is built from: 'XLMRobertaModel' -> 'BertModel' (jaxbert.model.families.root_class_name)."""
    return root_class_name(name)


def preset(name: str) -> BertConfig:
    """A named preset: a transformers config.json shipped in jaxbert/model/presets/."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; expected one of {PRESETS}")
    text = resources.files("jaxbert.model").joinpath("presets", f"{name}.json").read_text()
    return BertConfig.from_dict(json.loads(text))
