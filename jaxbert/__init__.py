"""jaxbert: BERT in JAX/Flax, with Hugging Face conversion, parity checks and MLM pretraining."""

from .config import BertConfig, ConfigError, preset
from .modeling import (BertAttention, BertEmbeddings, BertEncoder, BertIntermediate, BertLayer,
                       BertLMPredictionHead, BertOutput, BertPooler, BertPredictionHeadTransform,
                       BertSelfOutput)
from .modeling_attention import BertSelfAttention
from .modeling_heads import (MODEL_CLASSES, BertForMaskedLM, BertForMultipleChoice,
                             BertForNextSentencePrediction, BertForPreTraining,
                             BertForQuestionAnswering, BertForSequenceClassification,
                             BertForTokenClassification, BertLMHeadModel, BertModel,
                             BertPreTrainedModel, dummy_inputs, param_count)
from .modeling_utils import ModelOutput, is_scanned, scan_params, unscan_params
from .convert import (from_pretrained, params_to_state_dict, save_pretrained,
                      state_dict_to_params)

__version__ = "0.1.0"
