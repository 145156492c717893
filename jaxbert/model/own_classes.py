"""What the families whose classes are their own (ModernBERT, EuroBERT) share around those classes:
building one by name, with the guards every such family applies, reading a checkpoint's class from its
config and keys, and the base of their task classes (encoder, then head)."""

from __future__ import annotations

import flax.linen as nn

from jaxbert.model.options import ModelOptions


def build_class(family: str, classes: dict, config_class: type, model_type: str, class_name: str, config,
                options: ModelOptions, kwargs: dict):
    """classes[class_name](config, options), refusing by name a keyword (these families have no pooler), an
    unknown class, another family's config and decode (an encoder has no key/value cache)."""
    if kwargs:
        raise ValueError(f"{class_name} takes no {', '.join(sorted(kwargs))} (it has no pooler)")
    if class_name not in classes:
        raise ValueError(f"model class {class_name!r} is not a {family} class; expected one of {tuple(classes)}")
    if not isinstance(config, config_class):
        raise ValueError(f"{class_name} needs a {config_class.__name__} (model_type {model_type!r}), "
                         f"got {type(config).__name__} with model_type {getattr(config, 'model_type', None)!r}")
    if options.decode:
        raise ValueError(f"decode=True: {family} is an encoder; it has no key/value cache to decode with")
    return classes[class_name](config, options)


def class_of_checkpoint(config, keys, class_names: tuple, by_module: tuple, base_class: str) -> str | None:
    """A checkpoint's class: its config's architectures entry where it names one of class_names (None where it
    names only others), else the first (module set, class) of by_module whose modules all hold keys, else the
    bare encoder."""
    for arch in config.architectures or ():
        if arch in class_names:
            return arch
    if config.architectures:
        return None
    modules = {k.rpartition(".")[0] for k in keys}
    for needed, name in by_module:
        if set(needed) <= modules:
            return name
    return base_class


def no_head_mask(family: str, head_mask) -> None:
    """These families' attention takes no head mask (transformers' classes of theirs take none)."""
    if head_mask is not None:
        raise ValueError(f"head_mask: {family} has no head mask (transformers' {family} classes take none)")


def encoder_head(base, family: str):
    """The base of a family's task classes: `base` (which holds the encoder: its `encode`) called as every jaxbert
    model is, then the class's `head(out, attention_mask, deterministic)` on the encoder's output."""

    class EncoderHead(base):
        @nn.compact
        def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                     deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                     segment_ids=None):
            no_head_mask(family, head_mask)
            out = self.encode(input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
                              output_attentions, segment_ids)
            return self.head(out, attention_mask, deterministic)

    EncoderHead.__name__ = EncoderHead.__qualname__ = f"_{base.__name__}EncoderHead"
    return EncoderHead
