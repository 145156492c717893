"""ElectraConfig: transformers' ELECTRA config.json (4.57 and 5.x) as a frozen dataclass.

ELECTRA's encoder is BERT's; what the config adds is ``embedding_size``, the width of the three embedding
tables and their LayerNorm (projected to ``hidden_size`` by ``embeddings_project`` when the two differ), and
the ``summary_*`` fields of the multiple-choice head's sequence summary. Whatever a config.json holds is
written back as it came (keys jaxbert does not model stay in ``extra``). Anything jaxbert cannot honour
(relative position embeddings, the decoder use of ElectraForCausalLM, a summary it does not build) is refused
by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from jaxbert.errors import ConfigError
from jaxbert.model.families import family_of
from jaxbert.model.hf_config import ACTIVATIONS, HFConfig, hf_config

MODEL_TYPE = "electra"
# The classes transformers has, but its decoder-only ElectraForCausalLM.
CLASS_NAMES = ("ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForSequenceClassification",
               "ElectraForTokenClassification", "ElectraForQuestionAnswering", "ElectraForMultipleChoice")
SUMMARY_TYPES = ("first", "last", "mean")  # ElectraSequenceSummary's "cls_index" and "attn" are not built


@hf_config
class ElectraConfig(HFConfig):
    """transformers' ElectraConfig; ``ElectraConfig()`` is its default (ELECTRA-small's discriminator)."""

    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float = 0.1
    summary_first_dropout: float = 0.0
    summary_proj_to_labels: bool = False
    pad_token_id: int | None = 0
    position_embedding_type: str = "absolute"
    use_cache: bool = True
    classifier_dropout: float | None = None
    is_decoder: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True
    num_labels: int | None = None
    id2label: Mapping[int, str] | None = None
    label2id: Mapping[str, int] | None = None
    architectures: tuple | None = None
    model_type: str = MODEL_TYPE
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    DEFAULT_MODEL_TYPE = MODEL_TYPE
    CLASS_NAMES = CLASS_NAMES
    A_NAME = "an ELECTRA"

    def __post_init__(self):
        self._init_fields()
        self.validate()

    # ---- checks --------------------------------------------------------------------
    def validate(self) -> None:
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                              f"({self.num_attention_heads})")
        for name in ("hidden_act", "summary_activation"):
            value = getattr(self, name)
            if value is not None and value not in ACTIVATIONS:
                raise ConfigError(f"{name} {value!r} is unknown; expected one of {ACTIVATIONS}")
        if self.position_embedding_type != "absolute":
            raise ConfigError(f"position_embedding_type {self.position_embedding_type!r} is not supported for "
                              "ELECTRA; jaxbert builds its absolute position embeddings (transformers 5's only kind)")
        if self.is_decoder or self.add_cross_attention:
            raise ConfigError("is_decoder / add_cross_attention: jaxbert builds ELECTRA as an encoder "
                              "(ElectraForCausalLM is not one of its classes)")
        if self.summary_type not in SUMMARY_TYPES:
            raise ConfigError(f"summary_type {self.summary_type!r} is not supported; jaxbert builds {SUMMARY_TYPES}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout",
                     "summary_last_dropout", "summary_first_dropout"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        self._check_family()

    # ---- derived ---------------------------------------------------------------------
    @property
    def projects_embeddings(self) -> bool:
        """Whether the embeddings pass through ``embeddings_project`` (embedding_size != hidden_size)."""
        return self.embedding_size != self.hidden_size

    @property
    def summary_size(self) -> int:
        """The multiple-choice summary's output width: num_labels when projected to the labels, else hidden_size."""
        return self.num_labels if self.summary_use_proj and self.summary_proj_to_labels else self.hidden_size

    @property
    def family(self):
        """Its registry entry (BERT's embeddings ask it for the position rule)."""
        return family_of(self.model_type)

    def position_limit(self) -> int:
        """The longest sequence the position table holds."""
        return self.max_position_embeddings

    # ---- config.json -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """config.json: every key that came in, then the fields (the summary fields transformers' config does
        not set, and architectures, only when they came in or differ from its defaults)."""
        out = super().to_dict()
        for name, default in (("summary_first_dropout", 0.0), ("summary_proj_to_labels", False),
                              ("architectures", None)):
            if out.get(name) == default and name not in self.extra:
                del out[name]
        return out


ElectraConfig.FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size", "pad_token_id",
                     "num_labels"), int),
    **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps",
                     "summary_last_dropout", "summary_first_dropout", "classifier_dropout"), float),
    **dict.fromkeys(("summary_use_proj", "summary_proj_to_labels", "use_cache", "is_decoder", "add_cross_attention",
                     "tie_word_embeddings"), bool),
    **dict.fromkeys(("hidden_act", "summary_type", "summary_activation", "position_embedding_type", "model_type"),
                    str),
    **dict.fromkeys(("id2label", "label2id", "extra"), Mapping),
    **dict.fromkeys(("architectures",), list),
}
ElectraConfig.OPTIONAL = frozenset({"pad_token_id", "num_labels", "id2label", "label2id", "classifier_dropout",
                                    "summary_activation", "architectures"})
