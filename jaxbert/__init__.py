"""jaxbert: BERT in JAX/Flax, with Hugging Face conversion, parity checks and MLM pretraining."""

from jaxbert.model.config import MODEL_TYPES, BertConfig, ConfigError, preset
from jaxbert.model.encoder import (BertAttention, BertEmbeddings, BertEncoder, BertIntermediate, BertLayer,
                       BertLMPredictionHead, BertOutput, BertPooler, BertPredictionHeadTransform,
                       BertSelfOutput)
from jaxbert.model.attention import BertSelfAttention
from jaxbert.model.base import ModelOutput
from jaxbert.model.bert import BertModel, BertPreTrainedModel
from jaxbert.model.heads import (ALL_MODEL_CLASSES, MODEL_CLASSES, BertForMaskedLM, BertForMultipleChoice,
                             BertForNextSentencePrediction, BertForPreTraining,
                             BertForQuestionAnswering, BertForSequenceClassification,
                             BertForTokenClassification, BertLMHeadModel, RobertaForMaskedLM, RobertaForMultipleChoice,
                             RobertaForQuestionAnswering, RobertaForSequenceClassification,
                             RobertaForTokenClassification, RobertaModel, XLMRobertaForMaskedLM,
                             XLMRobertaForMultipleChoice, XLMRobertaForQuestionAnswering,
                             XLMRobertaForSequenceClassification, XLMRobertaForTokenClassification,
                             XLMRobertaModel, build_model, dummy_inputs, param_count)
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import is_scanned, scan_params, unscan_params
from jaxbert.convert import (from_pretrained, params_to_state_dict, save_pretrained,
                      state_dict_to_params)

__version__ = "0.1.0"
