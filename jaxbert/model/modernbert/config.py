"""ModernBertConfig: transformers' ModernBERT config.json as a frozen dataclass.

Both spellings are read: transformers 4.x's ``global_attn_every_n_layers``,
``global_rope_theta`` / ``local_rope_theta`` and ``local_attention`` (the whole window),
and 5.x's ``layer_types``, ``rope_parameters`` (per layer type) / ``rope_theta`` and
``sliding_window`` (half the window). Whatever a config.json holds is written back
as it came (keys jaxbert does not model stay in ``extra``); the derived values
(``layer_kinds``, ``global_theta``, ``local_theta``, ``half_window``) are what the
modules read. Anything jaxbert cannot honour is refused by name when the config is built.

The RoPE thetas have one home, ``global_rope_theta`` / ``local_rope_theta``: a 5.x file's
``rope_parameters`` thetas (or top-level ``rope_theta``) are moved there when the config is
built (``rope_parameters`` keeps the rest of each entry, ``rope_theta`` stays in ``extra`` as a
spelling), so ``replace(global_rope_theta=...)`` changes the model whatever the file's spelling,
and ``to_dict`` writes the thetas in effect under every spelling the file had. A file whose
spellings give one layer kind two different thetas is refused by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from jaxbert.errors import ConfigError
from jaxbert.model.hf_config import ACTIVATIONS, HFConfig, hf_config, is_int, is_number

MODEL_TYPE = "modernbert"
FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)
POOLINGS = ("cls", "mean")
# The classes transformers 4.57 has; a ModernBERT config names no other.
CLASS_NAMES = ("ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
               "ModernBertForTokenClassification", "ModernBertForQuestionAnswering", "ModernBertForMultipleChoice")


@hf_config
class ModernBertConfig(HFConfig):
    """transformers' ModernBertConfig (4.57 defaults: ModernBERT-base)."""

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float | None = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int | None = 50283
    eos_token_id: int | None = 50282
    bos_token_id: int | None = 50281
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282
    global_rope_theta: float = 160000.0
    attention_bias: bool = False
    attention_dropout: float = 0.0
    global_attn_every_n_layers: int = 3
    local_attention: int | None = 128
    local_rope_theta: float | None = 10000.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    deterministic_flash_attn: bool = False
    sparse_prediction: bool = False
    sparse_pred_ignore_index: int = -100
    reference_compile: bool | None = None
    repad_logits_with_grad: bool = False
    tie_word_embeddings: bool = True
    num_labels: int | None = None  # derived from id2label when that is given, as transformers does
    id2label: Mapping[int, str] | None = None
    label2id: Mapping[str, int] | None = None
    problem_type: str | None = None
    architectures: tuple | None = None
    # transformers 5.x spellings; None when the config.json does not have them.
    layer_types: tuple | None = None
    rope_parameters: Mapping[str, Any] | None = None  # without its thetas (moved to the theta fields)
    sliding_window: int | None = None
    model_type: str = MODEL_TYPE
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    DEFAULT_MODEL_TYPE = MODEL_TYPE
    CLASS_NAMES = CLASS_NAMES
    A_NAME = "a ModernBERT"

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        self._init_fields()
        if self.layer_types is not None:
            set_("layer_types", tuple(self.layer_types))
        if self.local_attention is None and self.sliding_window is not None:
            set_("local_attention", 2 * self.sliding_window if _is_int(self.sliding_window) else self.sliding_window)
        if isinstance(self.rope_parameters, Mapping):  # its thetas move to the theta fields (the one home)
            entries = {kind: dict(p) if isinstance(p, Mapping) else p for kind, p in self.rope_parameters.items()}
            for kind, field in ((FULL, "global_rope_theta"), (SLIDING, "local_rope_theta")):
                entry = entries.get(kind)
                if isinstance(entry, dict) and "rope_theta" in entry:
                    theta = entry.pop("rope_theta")
                    if not _is_number(theta):
                        raise ConfigError(f"rope_parameters[{kind!r}].rope_theta must be a number, got {theta!r}")
                    set_(field, float(theta))
            set_("rope_parameters", entries)
        if "rope_theta" in self.extra:  # a spelling only (from_dict moved its value): it follows the field
            self.extra["rope_theta"] = self.global_rope_theta
        self.validate()

    # ---- checks --------------------------------------------------------------------
    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "max_position_embeddings", "global_attn_every_n_layers"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size ({self.hidden_size}) must be divisible by "
                              f"num_attention_heads ({self.num_attention_heads})")
        if self.head_dim % 2:
            raise ConfigError(f"head dim hidden_size / num_attention_heads = {self.head_dim} must be even: "
                              "rotary embeddings rotate its two halves")
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ConfigError(f"{name} {getattr(self, name)!r} is unknown; expected one of {ACTIVATIONS}")
        if self.classifier_pooling not in POOLINGS:
            raise ConfigError(f"classifier_pooling {self.classifier_pooling!r} is unknown; expected one of {POOLINGS}")
        for name in ("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("initializer_range", "norm_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.initializer_cutoff_factor is not None and not self.initializer_cutoff_factor > 0:
            raise ConfigError(f"initializer_cutoff_factor must be > 0, got {self.initializer_cutoff_factor!r}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.layer_types is not None:
            for i, kind in enumerate(self.layer_types):
                if kind not in LAYER_TYPES:
                    raise ConfigError(f"layer_types[{i}] {kind!r} is not supported; jaxbert builds {LAYER_TYPES}")
            if len(self.layer_types) != self.num_hidden_layers:
                raise ConfigError(f"layer_types has {len(self.layer_types)} entries for "
                                  f"num_hidden_layers={self.num_hidden_layers}")
        if SLIDING in self.layer_kinds:
            window = self.local_attention
            if not _is_int(window) or window <= 0 or window % 2:
                raise ConfigError(f"local_attention {window!r} must be a positive even integer "
                                  "(the window spans local_attention // 2 tokens on each side)")
            if self.sliding_window is not None and self.sliding_window != window // 2:
                raise ConfigError(f"sliding_window {self.sliding_window!r} disagrees with local_attention "
                                  f"{window} (sliding_window is half the window)")
        if self.rope_parameters is not None:
            for kind, params in self.rope_parameters.items():
                if kind not in LAYER_TYPES:
                    raise ConfigError(f"rope_parameters[{kind!r}]: not a layer type; expected one of {LAYER_TYPES}")
                if not isinstance(params, Mapping):
                    raise ConfigError(f"rope_parameters[{kind!r}] must be a JSON object, got {params!r}")
                rope_type = params.get("rope_type", params.get("type", "default"))
                if rope_type != "default":
                    raise ConfigError(f"rope_parameters[{kind!r}] rope_type {rope_type!r} is not supported; "
                                      "jaxbert builds 'default' rotary embeddings")
        if self.extra.get("rope_scaling") is not None:
            raise ConfigError(f"rope_scaling {self.extra['rope_scaling']!r} is not supported; "
                              "jaxbert builds 'default' rotary embeddings")
        self._check_family()

    # ---- derived ---------------------------------------------------------------------
    @property
    def layer_kinds(self) -> tuple:
        """FULL or SLIDING per layer: layer_types when given, else every global_attn_every_n_layers-th is global."""
        if self.layer_types is not None:
            return self.layer_types
        n = self.global_attn_every_n_layers
        return tuple(FULL if i % n == 0 else SLIDING for i in range(self.num_hidden_layers))

    def transformers4_conflict(self) -> str | None:
        """Why transformers 4.x would build another model from this config's file, or None: 4.x reads
        global_attn_every_n_layers, not layer_types, so layer types that follow no every-n pattern
        (full, full, sliding, full) are beyond it."""
        n = self.global_attn_every_n_layers
        if self.layer_kinds == tuple(FULL if i % n == 0 else SLIDING for i in range(self.num_hidden_layers)):
            return None
        return (f"layer_types {list(self.layer_kinds)} follow no every-n pattern: transformers 4.x reads "
                f"global_attn_every_n_layers ({n}) instead and would build another model")

    @property
    def half_window(self) -> int:
        """A sliding layer's query attends to keys at most this far away on either side."""
        return self.local_attention // 2

    @property
    def global_theta(self) -> float:
        """RoPE base of the full-attention layers (a 5.x file's theta is moved to global_rope_theta on read)."""
        return float(self.global_rope_theta)

    @property
    def local_theta(self) -> float:
        """RoPE base of the sliding layers; transformers 4.x falls back to the global one when it is null."""
        return float(self.local_rope_theta if self.local_rope_theta is not None else self.global_rope_theta)

    @property
    def cutoff(self) -> float:
        """Truncation of the normal init, in standard deviations (transformers: 3 when the config says null)."""
        return 3.0 if self.initializer_cutoff_factor is None else float(self.initializer_cutoff_factor)

    def known_class(self, name: str) -> bool:
        """ModernBERT classes transformers has beyond the six jaxbert builds (its decoder ones) may be named."""
        return name in CLASS_NAMES or name.startswith("ModernBert")

    # ---- config.json -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModernBertConfig":
        cls.check_model_type(data.get("model_type", MODEL_TYPE))
        kwargs, extra = cls._split(data)
        _check_one_theta(data)
        if "rope_theta" in extra:  # one theta for every layer kind; the key stays in extra as the file's spelling
            if not _is_number(extra["rope_theta"]):
                raise ConfigError(f"rope_theta must be a finite number, got {extra['rope_theta']!r}")
            kwargs["global_rope_theta"] = float(extra["rope_theta"])
        # Keys the 5.x spelling leaves out must not take 4.x's defaults when the 5.x keys are there:
        # local_attention then comes from sliding_window.
        if "sliding_window" in data and "local_attention" not in data:
            kwargs["local_attention"] = None
        # Likewise global_attn_every_n_layers from layer_types, when they follow such a pattern.
        if isinstance(data.get("layer_types"), (list, tuple)) and "global_attn_every_n_layers" not in data:
            kinds = tuple(data["layer_types"])
            for n in range(1, len(kinds) + 1):
                if kinds == tuple(FULL if i % n == 0 else SLIDING for i in range(len(kinds))):
                    kwargs["global_attn_every_n_layers"] = n
                    break
        return cls(**kwargs, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """config.json: every key that came in, plus this version's fields (5.x keys only when given).

        The thetas in effect go under every spelling the config has: the 4.x keys always (transformers
        4.x reads only them), ``rope_parameters`` entries and ``rope_theta`` when the file had them.
        """
        out = dict(self.extra)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", "num_labels") or (f.name in _NEW_SPELLINGS and value is None):
                continue  # transformers derives num_labels from id2label
            if f.name == "id2label":
                value = {str(k): v for k, v in value.items()}
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out["global_rope_theta"] = self.global_theta
        if self.rope_parameters is not None:
            thetas = {FULL: self.global_theta, SLIDING: self.local_theta}
            out["rope_parameters"] = {kind: dict(p, rope_theta=thetas[kind]) if isinstance(p, Mapping) else p
                                      for kind, p in self.rope_parameters.items()}
        return out


def _check_one_theta(data: Mapping[str, Any]) -> None:
    """Refuse a config.json that gives one layer kind two thetas under two spellings (which one a
    reader takes depends on its transformers version)."""
    params = data.get("rope_parameters") if isinstance(data.get("rope_parameters"), Mapping) else {}
    entry = lambda kind: params.get(kind) if isinstance(params.get(kind), Mapping) else {}  # noqa: E731
    spellings = {FULL: [("global_rope_theta", data.get("global_rope_theta")), ("rope_theta", data.get("rope_theta")),
                        (f"rope_parameters[{FULL!r}].rope_theta", entry(FULL).get("rope_theta"))],
                 SLIDING: [("local_rope_theta", data.get("local_rope_theta")),
                           (f"rope_parameters[{SLIDING!r}].rope_theta", entry(SLIDING).get("rope_theta"))]}
    for kind, given in spellings.items():
        given = [(k, v) for k, v in given if _is_number(v)]
        for key, value in given[1:]:
            if float(value) != float(given[0][1]):
                raise ConfigError(f"{key} {value!r} disagrees with {given[0][0]} {given[0][1]!r} "
                                  f"(two thetas for the {kind} layers)")


_is_int, _is_number = is_int, is_number
_NEW_SPELLINGS = ("layer_types", "rope_parameters", "sliding_window")
ModernBertConfig.FIELD_TYPES = {
    **dict.fromkeys(("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "max_position_embeddings", "pad_token_id", "eos_token_id", "bos_token_id", "cls_token_id",
                     "sep_token_id", "global_attn_every_n_layers", "sparse_pred_ignore_index", "num_labels",
                     "sliding_window"), int),
    **dict.fromkeys(("initializer_range", "initializer_cutoff_factor", "norm_eps", "global_rope_theta",
                     "attention_dropout", "local_rope_theta", "embedding_dropout", "mlp_dropout",
                     "classifier_dropout"), float),
    **dict.fromkeys(("norm_bias", "attention_bias", "mlp_bias", "decoder_bias", "classifier_bias",
                     "deterministic_flash_attn", "sparse_prediction", "repad_logits_with_grad",
                     "tie_word_embeddings"), bool),
    **dict.fromkeys(("hidden_activation", "classifier_pooling", "classifier_activation", "model_type",
                     "problem_type"), str),
    **dict.fromkeys(("id2label", "label2id", "rope_parameters", "extra"), Mapping),
    **dict.fromkeys(("layer_types", "architectures"), list),
}
ModernBertConfig.OPTIONAL = frozenset({"initializer_cutoff_factor", "pad_token_id", "eos_token_id", "bos_token_id", "cls_token_id",
             "sep_token_id", "local_rope_theta", "num_labels", "id2label", "label2id", "problem_type",
             "architectures", "layer_types", "rope_parameters", "sliding_window", "local_attention"})
