"""jaxbert: BERT in JAX/Flax, with Hugging Face conversion, parity checks and MLM pretraining.

Importing jaxbert loads nothing heavy: each public name below imports its module (and jax)
on first use, so that the `jaxbert` command starts without jax. Every model class and config
class of the registered families (jaxbert.model.families.FAMILIES: RobertaForMaskedLM,
ModernBertForMaskedLM, ModernBertConfig, ...) is a public name too, found in the registry when
first asked for.
"""

import importlib

_EXPORTS = {
    'FAMILIES': 'jaxbert.model.families',
    'MODEL_TYPES': 'jaxbert.model.families',
    'BertConfig': 'jaxbert.model.config',
    'ConfigError': 'jaxbert.model.config',
    'preset': 'jaxbert.model.config',
    'BertAttention': 'jaxbert.model.encoder',
    'BertEmbeddings': 'jaxbert.model.encoder',
    'BertEncoder': 'jaxbert.model.encoder',
    'BertIntermediate': 'jaxbert.model.encoder',
    'BertLayer': 'jaxbert.model.encoder',
    'BertLMPredictionHead': 'jaxbert.model.encoder',
    'BertOutput': 'jaxbert.model.encoder',
    'BertPooler': 'jaxbert.model.encoder',
    'BertPredictionHeadTransform': 'jaxbert.model.encoder',
    'BertSelfOutput': 'jaxbert.model.encoder',
    'BertSelfAttention': 'jaxbert.model.attention',
    'ModelOutput': 'jaxbert.model.base',
    'BertModel': 'jaxbert.model.bert',
    'BertPreTrainedModel': 'jaxbert.model.bert',
    'ALL_MODEL_CLASSES': 'jaxbert.model.heads',
    'MODEL_CLASSES': 'jaxbert.model.heads',
    'BertForMaskedLM': 'jaxbert.model.heads',
    'BertForMultipleChoice': 'jaxbert.model.heads',
    'BertForNextSentencePrediction': 'jaxbert.model.heads',
    'BertForPreTraining': 'jaxbert.model.heads',
    'BertForQuestionAnswering': 'jaxbert.model.heads',
    'BertForSequenceClassification': 'jaxbert.model.heads',
    'BertForTokenClassification': 'jaxbert.model.heads',
    'BertLMHeadModel': 'jaxbert.model.heads',
    'build_model': 'jaxbert.model.heads',
    'dummy_inputs': 'jaxbert.model.heads',
    'param_count': 'jaxbert.model.heads',
    'ModelOptions': 'jaxbert.model.options',
    'is_scanned': 'jaxbert.model.params',
    'scan_params': 'jaxbert.model.params',
    'unscan_params': 'jaxbert.model.params',
    'from_pretrained': 'jaxbert.convert',
    'params_to_state_dict': 'jaxbert.convert',
    'save_pretrained': 'jaxbert.convert',
    'state_dict_to_params': 'jaxbert.convert',
}
__version__ = "0.3.0"


def _family_names() -> dict:
    """Every registered family's model and config classes, by name (imports the model code)."""
    heads = importlib.import_module("jaxbert.model.heads")
    configs = {c.__name__: c for c in importlib.import_module("jaxbert.model.config").config_classes()}
    return {**configs, **heads.ALL_MODEL_CLASSES}


def __getattr__(name: str):
    if name == "__all__":  # `from jaxbert import *`: the fixed names and every family's classes
        return sorted(set(_EXPORTS) | set(_family_names()))
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name[:1].isupper() and name in _family_names():
        value = _family_names()[name]
    else:
        raise AttributeError(f"module 'jaxbert' has no attribute {name!r}")
    if name != "MODEL_TYPES":  # read afresh: a registered family adds its types
        globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
