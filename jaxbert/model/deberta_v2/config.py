"""DebertaV2Config: transformers' ``deberta-v2`` config.json (DeBERTa-v2 and DeBERTa-v3 checkpoints) as a frozen
dataclass.

Besides the fields transformers' DebertaV2Config names, its modules read several keys with ``getattr`` and a
default (``share_att_key``, ``position_buckets``, ``norm_rel_ebd``, ``conv_kernel_size``, ``conv_groups``,
``conv_act``, ``embedding_size``, ``pooler_hidden_size``, ``cls_dropout``); they are fields here with those
defaults, written back only when they came in, so a config.json round-trips as it was. ``pos_att_type`` is kept as
it came (the released checkpoints write ``"p2c|c2p"``, transformers writes a list) and read as ``att_terms``.
Anything jaxbert cannot honour is refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping  # noqa: UP035 (HFConfig's FIELD_TYPES are keyed by typing.Mapping)

from jaxbert.errors import ConfigError
from jaxbert.model.hf_config import ACTIVATIONS, HFConfig, hf_config

MODEL_TYPE = "deberta-v2"
PREFIX = "DebertaV2"
# The classes transformers has (4.57 and 5.x), then jaxbert's own replaced-token-detection discriminator
# (DeBERTa-v3's RTD head, which transformers lacks); a deberta-v2 config names no other.
CLASS_NAMES = tuple(PREFIX + s for s in ("Model", "ForMaskedLM", "ForSequenceClassification",
                                         "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice",
                                         "ForReplacedTokenDetection"))
RTD_CLASS = PREFIX + "ForReplacedTokenDetection"  # jaxbert's own: no transformers class to compare with
TERMS = ("c2p", "p2c")
# Keys transformers' modules read with getattr and a default: written back only when the config.json had them.
READ_WITH_DEFAULT = ("share_att_key", "position_buckets", "norm_rel_ebd", "conv_kernel_size", "conv_groups",
                     "conv_act", "embedding_size", "pooler_hidden_size", "cls_dropout", "tie_word_embeddings")


@hf_config
class DebertaV2Config(HFConfig):
    """transformers' DebertaV2Config (its defaults: DeBERTa-v2-xlarge's shape, vocabulary 128,100)."""

    vocab_size: int = 128100
    hidden_size: int = 1536
    num_hidden_layers: int = 24
    num_attention_heads: int = 24
    intermediate_size: int = 6144
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 0
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-7
    relative_attention: bool = False
    max_relative_positions: int = -1  # < 1: max_position_embeddings
    pad_token_id: int | None = 0
    position_biased_input: bool = True
    pos_att_type: Any = None  # a list of "c2p" / "p2c", or the released checkpoints' "p2c|c2p"
    pooler_dropout: float = 0.0
    pooler_hidden_act: str = "gelu"
    legacy: bool = True
    # read by transformers' modules with getattr and these defaults
    share_att_key: bool = False
    position_buckets: int = -1
    norm_rel_ebd: str = "none"
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_act: str = "tanh"
    embedding_size: int | None = None  # None: hidden_size
    pooler_hidden_size: int | None = None  # None: hidden_size
    cls_dropout: float | None = None  # None: hidden_dropout_prob
    tie_word_embeddings: bool = True
    num_labels: int | None = None
    id2label: Mapping[int, str] | None = None
    label2id: Mapping[str, int] | None = None
    problem_type: str | None = None
    architectures: tuple | None = None
    model_type: str = MODEL_TYPE
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    DEFAULT_MODEL_TYPE = MODEL_TYPE
    CLASS_NAMES = CLASS_NAMES
    A_NAME = "a DeBERTa-v2"
    OWN_CLASSES = (RTD_CLASS,)

    def __post_init__(self):
        self._init_fields()
        extra = dict(self.extra)
        # the keys that came in, so that to_dict writes back exactly those of READ_WITH_DEFAULT
        extra.setdefault("_given", tuple(k for k in READ_WITH_DEFAULT if getattr(self, k) !=
                                         _DEFAULTS[k]))
        object.__setattr__(self, "extra", extra)
        self.validate()

    # ---- derived ---------------------------------------------------------------------
    @property
    def att_terms(self) -> tuple:
        """The relative terms pos_att_type names, each once, lower case ("c2p", "p2c")."""
        value = self.pos_att_type
        if value is None:
            return ()
        parts = value.lower().split("|") if isinstance(value, str) else list(value)
        return tuple(dict.fromkeys(str(p).strip().lower() for p in parts if str(p).strip()))

    @property
    def scale_factor(self) -> int:
        """1 + the number of relative terms: scores are divided by sqrt(head_dim * scale_factor) (even without
        relative_attention, as transformers does)."""
        return 1 + len(self.att_terms)

    @property
    def max_relative(self) -> int:
        """max_relative_positions, or max_position_embeddings where it is < 1."""
        return self.max_relative_positions if self.max_relative_positions >= 1 else self.max_position_embeddings

    @property
    def att_span(self) -> int:
        """Half the relative-embedding table's rows: position_buckets where > 0, else max_relative."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative

    @property
    def norm_rel(self) -> bool:
        """Whether the relative embeddings pass a LayerNorm (norm_rel_ebd names "layer_norm")."""
        return "layer_norm" in [x.strip() for x in self.norm_rel_ebd.lower().split("|")]

    @property
    def embed_size(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def pooler_size(self) -> int:
        return self.hidden_size if self.pooler_hidden_size is None else self.pooler_hidden_size

    @property
    def classifier_dropout(self) -> float:
        return self.hidden_dropout_prob if self.cls_dropout is None else self.cls_dropout

    # ---- checks --------------------------------------------------------------------
    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "conv_groups", "embed_size", "pooler_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                              f"({self.num_attention_heads})")
        if "attention_head_size" in self.extra and self.extra["attention_head_size"] != self.head_dim:
            raise ConfigError(f"attention_head_size {self.extra['attention_head_size']!r} is not supported; jaxbert "
                              f"takes hidden_size / num_attention_heads ({self.head_dim})")
        for name in ("hidden_act", "pooler_hidden_act", "conv_act"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ConfigError(f"{name} {getattr(self, name)!r} is unknown; expected one of {ACTIVATIONS}")
        if not (self.pos_att_type is None or isinstance(self.pos_att_type, str)
                or (isinstance(self.pos_att_type, (list, tuple)) and all(isinstance(t, str) for t in self.pos_att_type))):
            raise ConfigError(f"pos_att_type must be a list of strings or a '|'-joined string, got {self.pos_att_type!r}")
        unknown = [t for t in self.att_terms if t not in TERMS]
        if unknown:
            raise ConfigError(f"pos_att_type {self.pos_att_type!r} names {unknown}; DeBERTa-v2 has the terms {TERMS}")
        if self.type_vocab_size < 0:
            raise ConfigError(f"type_vocab_size must be >= 0, got {self.type_vocab_size!r}")
        if self.conv_kernel_size < 0 or (self.conv_kernel_size and self.conv_kernel_size % 2 == 0):
            raise ConfigError(f"conv_kernel_size {self.conv_kernel_size!r} is not supported; jaxbert takes 0 (no "
                              "convolution) or an odd size (transformers' padding keeps the length only then)")
        if self.conv_kernel_size and self.hidden_size % self.conv_groups:
            raise ConfigError(f"conv_groups ({self.conv_groups}) must divide hidden_size ({self.hidden_size})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "pooler_dropout", "classifier_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.relative_attention and self.position_buckets > 0 and self.max_relative < 2 + self.position_buckets // 2:
            raise ConfigError(f"max_relative_positions {self.max_relative} must exceed position_buckets // 2 + 1 "
                              f"({self.position_buckets // 2 + 1}): the log buckets span from there to it")
        if self.norm_rel and not self.relative_attention:
            raise ConfigError("norm_rel_ebd 'layer_norm' without relative_attention is not supported: the norm of "
                              "relative embeddings the model does not have")
        if self.relative_attention and self.position_buckets > 0 and self.position_buckets < 4:
            raise ConfigError(f"position_buckets {self.position_buckets} is too few: > 0 needs at least 4")
        if self.legacy and not self.tie_word_embeddings:
            raise ConfigError("tie_word_embeddings false with legacy true is not supported for deberta-v2: jaxbert's "
                              "cls.predictions decoder is the word-embedding table (the lm_predictions layout, legacy "
                              "false, reads the table whatever tie_word_embeddings says)")
        if not self.legacy and self.embed_size != self.hidden_size:
            raise ConfigError(f"legacy false with embedding_size {self.embed_size} != hidden_size {self.hidden_size}: "
                              "the lm_predictions head multiplies hidden states by the embedding table")
        if self.pooler_size != self.hidden_size:
            raise ConfigError(f"pooler_hidden_size {self.pooler_size} != hidden_size {self.hidden_size}: the pooler "
                              "reads the hidden state")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        self._check_family()

    # ---- config.json -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DebertaV2Config:
        cls.check_model_type(data.get("model_type", MODEL_TYPE))
        kwargs, extra = cls._split(data)
        extra["_given"] = tuple(k for k in READ_WITH_DEFAULT if k in data)
        return cls(**kwargs, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """config.json: every key that came in, then the fields; those transformers reads with getattr only when
        they came in (or differ from its default)."""
        out = super().to_dict()
        given = out.pop("_given", ())
        for name in READ_WITH_DEFAULT:
            if name not in given and getattr(self, name) == _DEFAULTS[name]:
                del out[name]
        return out


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DebertaV2Config) if f.name in READ_WITH_DEFAULT}

DebertaV2Config.FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size", "max_relative_positions", "pad_token_id",
                     "position_buckets", "conv_kernel_size", "conv_groups", "embedding_size", "pooler_hidden_size",
                     "num_labels"), int),
    **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps",
                     "pooler_dropout", "cls_dropout"), float),
    **dict.fromkeys(("relative_attention", "position_biased_input", "legacy", "share_att_key",
                     "tie_word_embeddings"), bool),
    **dict.fromkeys(("hidden_act", "pooler_hidden_act", "norm_rel_ebd", "conv_act", "model_type", "problem_type"),
                    str),
    **dict.fromkeys(("id2label", "label2id", "extra"), Mapping),
    **dict.fromkeys(("architectures",), list),
}
DebertaV2Config.OPTIONAL = frozenset({"pad_token_id", "pos_att_type", "embedding_size", "pooler_hidden_size",
                                      "cls_dropout", "num_labels", "id2label", "label2id", "problem_type",
                                      "architectures"})
