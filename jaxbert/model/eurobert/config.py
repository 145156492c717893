"""EuroBertConfig: transformers 5.x's EuroBERT config.json as a frozen dataclass.

RoPE's theta is read from ``rope_parameters`` (transformers 5's spelling) or from a top-level
``rope_theta`` (the spelling of the checkpoints released before EuroBERT joined transformers, which
transformers 5 reads into rope_parameters); absent both, transformers' default 10,000. Whatever a
config.json holds is written back as it came (keys jaxbert does not model stay in ``extra``), with
``rope_parameters``, ``num_key_value_heads`` and ``head_dim`` always written, as transformers writes
them. Anything jaxbert cannot honour (another rope_type, heads that do not group) is refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from jaxbert.errors import ConfigError
from jaxbert.model.hf_config import ACTIVATIONS, HFConfig, hf_config, is_int, is_number

MODEL_TYPE = "eurobert"
POOLINGS = ("bos", "mean", "late")
DEFAULT_THETA = 10000.0  # transformers' when a config names none (the released models say 250,000)
# The classes transformers 5 has; a EuroBERT config names no other.
CLASS_NAMES = ("EuroBertModel", "EuroBertForMaskedLM", "EuroBertForSequenceClassification",
               "EuroBertForTokenClassification")


@hf_config
class EuroBertConfig(HFConfig):
    """transformers' EuroBertConfig (5.x defaults: EuroBERT-210m's shape, vocabulary 128,256)."""

    vocab_size: int = 128256
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_key_value_heads: int | None = None  # None: num_attention_heads (no grouping), as transformers sets it
    hidden_act: str = "silu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-5
    use_cache: bool = True
    pad_token_id: int | None = 128001
    bos_token_id: int | None = 128000
    eos_token_id: Any = 128001  # an id or a list of ids
    pretraining_tp: int = 1
    tie_word_embeddings: bool = False
    rope_parameters: Mapping[str, Any] | None = None
    attention_bias: bool = False
    attention_dropout: float = 0.0
    mlp_bias: bool = False
    head_dim: int | None = None  # None: hidden_size // num_attention_heads, as transformers sets it
    mask_token_id: int | None = 128002
    classifier_pooling: str = "late"
    num_labels: int | None = None  # derived from id2label when that is given, as transformers does
    id2label: Mapping[int, str] | None = None
    label2id: Mapping[str, int] | None = None
    problem_type: str | None = None
    architectures: tuple | None = None
    rope_theta: float | None = None  # the spelling before transformers 5, kept as it came
    model_type: str = MODEL_TYPE
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    DEFAULT_MODEL_TYPE = MODEL_TYPE
    CLASS_NAMES = CLASS_NAMES
    A_NAME = "a EuroBERT"

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        self._init_fields()
        if self.num_key_value_heads is None:
            set_("num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None and is_int(self.num_attention_heads) and self.num_attention_heads > 0:
            set_("head_dim", self.hidden_size // self.num_attention_heads)
        if self.rope_parameters is None:
            theta = DEFAULT_THETA if self.rope_theta is None else self.rope_theta
            set_("rope_parameters", {"rope_type": "default", "rope_theta": float(theta)})
        else:
            set_("rope_parameters", dict(self.rope_parameters))
        self.validate()

    # ---- checks --------------------------------------------------------------------
    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "max_position_embeddings", "head_dim"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                              f"num_key_value_heads ({self.num_key_value_heads}): each key/value head serves a group")
        if self.head_dim % 2:
            raise ConfigError(f"head_dim {self.head_dim} must be even: rotary embeddings rotate its two halves")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act {self.hidden_act!r} is unknown; expected one of {ACTIVATIONS}")
        if self.classifier_pooling not in POOLINGS:
            raise ConfigError(f"classifier_pooling {self.classifier_pooling!r} is unknown; expected one of {POOLINGS}")
        if not 0.0 <= self.attention_dropout < 1.0:
            raise ConfigError(f"attention_dropout must be in [0, 1), got {self.attention_dropout!r}")
        for name in ("initializer_range", "rms_norm_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("pad_token_id", "bos_token_id", "mask_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ConfigError(f"{name} {value} is outside the vocabulary (size {self.vocab_size})")
        eos = self.eos_token_id
        if not (eos is None or is_int(eos) or (isinstance(eos, (list, tuple)) and all(map(is_int, eos)))):
            raise ConfigError(f"eos_token_id must be an integer or a list of integers, got {eos!r}")
        rope = self.rope_parameters
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ConfigError(f"rope_parameters rope_type {rope_type!r} is not supported; "
                              "jaxbert builds 'default' rotary embeddings")
        if not is_number(rope.get("rope_theta")):
            raise ConfigError(f"rope_parameters.rope_theta must be a number, got {rope.get('rope_theta')!r}")
        if self.rope_theta is not None and float(self.rope_theta) != float(rope["rope_theta"]):
            raise ConfigError(f"rope_theta {self.rope_theta!r} disagrees with rope_parameters.rope_theta "
                              f"{rope['rope_theta']!r}")
        scaling = self.extra.get("rope_scaling")
        if scaling is not None and (not isinstance(scaling, Mapping)
                                    or scaling.get("rope_type", scaling.get("type", "default")) != "default"):
            raise ConfigError(f"rope_scaling {scaling!r} is not supported; jaxbert builds 'default' rotary embeddings")
        self._check_family()

    # ---- derived ---------------------------------------------------------------------
    @property
    def theta(self) -> float:
        """RoPE's base, every layer's."""
        return float(self.rope_parameters["rope_theta"])

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1: plain multi-head attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    # ---- config.json -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """config.json: every key that came in, then the fields (rope_theta only when it came in)."""
        out = super().to_dict()
        if self.rope_theta is None:
            del out["rope_theta"]
        return out


EuroBertConfig.FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "max_position_embeddings", "pad_token_id", "bos_token_id",
                     "pretraining_tp", "head_dim", "mask_token_id", "num_labels"), int),
    **dict.fromkeys(("initializer_range", "rms_norm_eps", "attention_dropout", "rope_theta"), float),
    **dict.fromkeys(("use_cache", "tie_word_embeddings", "attention_bias", "mlp_bias"), bool),
    **dict.fromkeys(("hidden_act", "classifier_pooling", "model_type", "problem_type"), str),
    **dict.fromkeys(("id2label", "label2id", "rope_parameters", "extra"), Mapping),
    **dict.fromkeys(("architectures",), list),
}
EuroBertConfig.OPTIONAL = frozenset({"num_key_value_heads", "pad_token_id", "bos_token_id", "head_dim",
                                     "mask_token_id", "num_labels", "id2label", "label2id", "problem_type",
                                     "architectures", "rope_parameters", "rope_theta"})
