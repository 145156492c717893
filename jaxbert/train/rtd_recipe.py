"""The recipe's `rtd` section and its checks: replaced-token detection (train.objective: rtd).

```yaml
model: {preset: electra, model_class: ElectraForPreTraining}   # the discriminator
train: {objective: rtd}
rtd:
  generator: {width: 1/3, depth: 1}   # or hidden_size / num_hidden_layers / num_attention_heads / intermediate_size
  weight: 50                          # lambda: total = MLM + weight x RTD
  sharing: tied                       # tied (ELECTRA) | gdes (DeBERTa-v3) | none
```

The generator is the discriminator's config with its own size: each of hidden_size, num_hidden_layers,
num_attention_heads and intermediate_size given, else the discriminator's scaled by ``width`` (hidden,
heads, intermediate) or ``depth`` (layers), rounded, at least 1. Its embedding tables keep the
discriminator's width (ELECTRA's ``embedding_size``) so that they can be shared. Every refusal is one
RecipeError naming the key, raised where the recipe is read, before anything is written.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Optional

from jaxbert.engine.recipe import RecipeError, build, check_choice
from jaxbert.model.families import family_of
from jaxbert.train.rtd import DEFAULT_WEIGHT, SHARINGS

OBJECTIVES = ("mlm", "rtd")
# family -> (its discriminator class, its generator class): the families jaxbert has an RTD head for.
DISCRIMINATORS = {"electra": ("ElectraForPreTraining", "ElectraForMaskedLM"),
                  # DeBERTa-v3: jaxbert's own discriminator (transformers has no DeBERTa RTD head)
                  "deberta-v2": ("DebertaV2ForReplacedTokenDetection", "DebertaV2ForMaskedLM")}
DISCRIMINATOR_CLASSES = tuple(d for d, _ in DISCRIMINATORS.values())
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def read_fraction(value, key: str) -> float:
    """A fraction as a recipe writes it: a number or "a/b" (YAML reads 1/3 as a string); in (0, 1]."""
    try:
        number = float(Fraction(value)) if isinstance(value, str) else float(value)
    except (ValueError, ZeroDivisionError, TypeError):
        raise RecipeError(f"{key}: {value!r} is not a number or a fraction like 1/3") from None
    if isinstance(value, bool) or not 0 < number <= 1:
        raise RecipeError(f"{key}: must be in (0, 1] of the discriminator's size, got {value!r}")
    return number


@dataclasses.dataclass
class GeneratorSection:
    width: Optional[str] = None  # of the discriminator's hidden size, heads and intermediate size: 1/3, 0.25
    depth: Optional[str] = None  # of its layer count: 1/2
    hidden_size: Optional[int] = None
    num_hidden_layers: Optional[int] = None
    num_attention_heads: Optional[int] = None
    intermediate_size: Optional[int] = None

    def check(self, prefix: str = "rtd.generator.") -> None:
        for key in ("width", "depth"):
            if getattr(self, key) is not None:
                read_fraction(getattr(self, key), prefix + key)
        for key in SIZE_KEYS:
            value = getattr(self, key)
            if value is not None and value < 1:
                raise RecipeError(f"{prefix}{key}: must be >= 1, got {value!r}")

    def sizes(self, cfg) -> dict:
        """The generator's four sizes from the discriminator's config ``cfg``."""
        width = read_fraction(self.width, "rtd.generator.width") if self.width is not None else 1.0
        depth = read_fraction(self.depth, "rtd.generator.depth") if self.depth is not None else 1.0
        scale = {"hidden_size": width, "num_attention_heads": width, "intermediate_size": width,
                 "num_hidden_layers": depth}
        return {key: getattr(self, key) if getattr(self, key) is not None
                else max(1, round(getattr(cfg, key) * scale[key])) for key in SIZE_KEYS}


def _read_generator(value, key):
    if not isinstance(value, dict):
        raise RecipeError(f"{key}: expected a mapping like {{width: 1/3}}, got {value!r}")
    # width and depth may be numbers or "a/b" strings: kept as written, read by read_fraction
    data = {k: (str(v) if k in ("width", "depth") and not isinstance(v, (str, bool)) and v is not None else v)
            for k, v in value.items()}
    return build(GeneratorSection, data, key + ".")


@dataclasses.dataclass
class RtdSection:
    generator: GeneratorSection = dataclasses.field(default_factory=GeneratorSection,
                                                    metadata={"read": _read_generator})
    weight: float = DEFAULT_WEIGHT  # lambda
    sharing: str = "tied"

    def check(self, prefix: str = "rtd.") -> None:
        check_choice(f"{prefix}sharing", self.sharing, SHARINGS)
        if not self.weight > 0:
            raise RecipeError(f"{prefix}weight: lambda must be > 0 (total = MLM + weight x RTD), got {self.weight!r}")
        self.generator.check(prefix + "generator.")


def generator_config(section: RtdSection, cfg):
    """The generator's config: the discriminator's ``cfg`` with the generator's sizes."""
    return cfg.replace(**section.generator.sizes(cfg))


def check_recipe(recipe, cfg) -> None:
    """An RTD recipe against its model (cfg: the discriminator's config): a family with a discriminator head,
    model.model_class its discriminator, a generator no larger than the discriminator with a valid config,
    embeddings that can be shared; an MLM recipe naming a discriminator class is refused too."""
    objective = recipe.train.objective
    check_choice("train.objective", objective, OBJECTIVES)
    if objective == "mlm":
        if recipe.model.model_class in DISCRIMINATOR_CLASSES:
            raise RecipeError(f"model.model_class: {recipe.model.model_class} is a discriminator, trained by "
                              "train.objective: rtd; an MLM recipe trains a masked-LM class")
        return
    family = family_of(cfg).name
    if family not in DISCRIMINATORS:
        raise RecipeError(f"train.objective: rtd needs a discriminator head, which jaxbert has for "
                          f"{', '.join(DISCRIMINATORS)} only, not the {family} family of model.preset / "
                          f"model.config; use train.objective: mlm or an {' / '.join(DISCRIMINATORS)} model")
    disc_class, _ = DISCRIMINATORS[family]
    if recipe.model.model_class != disc_class:
        raise RecipeError(f"model.model_class: train.objective: rtd trains the discriminator, {disc_class}; "
                          f"got {recipe.model.model_class}")
    if recipe.model.init_from and recipe.model.init_tile:
        raise RecipeError("model.init_tile: tiling a smaller model into a larger one is for MLM runs; an RTD run's "
                          "model.init_from loads both models at their own sizes")
    if recipe.data.nsp:
        raise RecipeError("data.nsp: next-sentence pairs are for BertForPreTraining; an RTD recipe takes MLM data")
    section = recipe.rtd
    sizes = section.generator.sizes(cfg)
    for key in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads"):
        if sizes[key] > getattr(cfg, key):
            raise RecipeError(f"rtd.generator: its {key} {sizes[key]} is larger than the discriminator's "
                              f"{getattr(cfg, key)}; the generator is the smaller model (ELECTRA: 1/4 to 1/3 "
                              "of the width)")
    try:
        gen = generator_config(section, cfg)
    except Exception as e:  # noqa: BLE001 - the config class's own check (ConfigError, ValueError)
        raise RecipeError(f"rtd.generator: {e}") from None
    if section.sharing == "none":
        return
    width = lambda c: getattr(c, "embedding_size", None) or c.hidden_size  # noqa: E731
    if width(gen) != width(cfg) or gen.vocab_size != cfg.vocab_size:
        raise RecipeError(f"rtd.sharing: {section.sharing} shares the embedding tables, but the generator's are "
                          f"{gen.vocab_size} x {width(gen)} and the discriminator's {cfg.vocab_size} x {width(cfg)}; "
                          "give the generator the discriminator's embedding width, or rtd.sharing: none")
    if section.sharing == "gdes" and not (getattr(gen, "tie_word_embeddings", True)):
        raise RecipeError("rtd.sharing: gdes trains E_G through the generator's vocabulary projection tied to its "
                          "word embeddings, and model.config.tie_word_embeddings is false (untied vocabularies); "
                          "set it true, or rtd.sharing: tied / none")
