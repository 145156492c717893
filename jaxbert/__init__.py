"""jaxbert: BERT in JAX/Flax, with Hugging Face conversion, parity checks and MLM pretraining.

Importing jaxbert loads nothing heavy: each public name below imports its module (and jax)
on first use, so that the `jaxbert` command starts without jax.
"""

import importlib

_EXPORTS = {
    'MODEL_TYPES': 'jaxbert.model.config',
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
    'RobertaForMaskedLM': 'jaxbert.model.heads',
    'RobertaForMultipleChoice': 'jaxbert.model.heads',
    'RobertaForQuestionAnswering': 'jaxbert.model.heads',
    'RobertaForSequenceClassification': 'jaxbert.model.heads',
    'RobertaForTokenClassification': 'jaxbert.model.heads',
    'RobertaModel': 'jaxbert.model.heads',
    'XLMRobertaForMaskedLM': 'jaxbert.model.heads',
    'XLMRobertaForMultipleChoice': 'jaxbert.model.heads',
    'XLMRobertaForQuestionAnswering': 'jaxbert.model.heads',
    'XLMRobertaForSequenceClassification': 'jaxbert.model.heads',
    'XLMRobertaForTokenClassification': 'jaxbert.model.heads',
    'XLMRobertaModel': 'jaxbert.model.heads',
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
__all__ = sorted(_EXPORTS)
__version__ = "0.2.0"


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxbert' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
