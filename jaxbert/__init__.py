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
    'BertConfig': 'jaxbert.model.bert.config',
    'ConfigError': 'jaxbert.model.configs',
    'preset': 'jaxbert.model.configs',
    'BertAttention': 'jaxbert.model.bert.encoder',
    'BertEmbeddings': 'jaxbert.model.bert.encoder',
    'BertEncoder': 'jaxbert.model.bert.encoder',
    'BertIntermediate': 'jaxbert.model.bert.encoder',
    'BertLayer': 'jaxbert.model.bert.encoder',
    'BertLMPredictionHead': 'jaxbert.model.bert.encoder',
    'BertOutput': 'jaxbert.model.bert.encoder',
    'BertPooler': 'jaxbert.model.bert.encoder',
    'BertPredictionHeadTransform': 'jaxbert.model.bert.encoder',
    'BertSelfOutput': 'jaxbert.model.bert.encoder',
    'BertSelfAttention': 'jaxbert.model.bert.attention',
    'ModelOutput': 'jaxbert.model.base',
    'BertModel': 'jaxbert.model.bert.modules',
    'BertPreTrainedModel': 'jaxbert.model.bert.modules',
    'ALL_MODEL_CLASSES': 'jaxbert.model.classes',
    'MODEL_CLASSES': 'jaxbert.model.bert.heads',
    'BertForMaskedLM': 'jaxbert.model.bert.heads',
    'BertForMultipleChoice': 'jaxbert.model.bert.heads',
    'BertForNextSentencePrediction': 'jaxbert.model.bert.heads',
    'BertForPreTraining': 'jaxbert.model.bert.heads',
    'BertForQuestionAnswering': 'jaxbert.model.bert.heads',
    'BertForSequenceClassification': 'jaxbert.model.bert.heads',
    'BertForTokenClassification': 'jaxbert.model.bert.heads',
    'BertLMHeadModel': 'jaxbert.model.bert.heads',
    'build_model': 'jaxbert.model.classes',
    'dummy_inputs': 'jaxbert.model.classes',
    'param_count': 'jaxbert.model.classes',
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
    classes = importlib.import_module("jaxbert.model.classes")
    configs = {c.__name__: c for c in importlib.import_module("jaxbert.model.configs").config_classes()}
    return {**configs, **classes.ALL_MODEL_CLASSES}


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
    # Kept only for the fixed names: MODEL_TYPES and the families' classes are read afresh, so a family
    # registered (or unregistered) at run time is what `jaxbert.NAME` answers.
    if module is not None and name != "MODEL_TYPES":
        globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
