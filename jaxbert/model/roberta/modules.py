"""RoBERTa's own modules on BERT's encoder: its position ids, its MLM head, its sequence classifier,
and its classes: BERT's, under RoBERTa's and XLM-RoBERTa's names (the config decides the layout:
the encoder under "roberta", the MLM head "lm_head", the classifier on the first token)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxbert.model.activations import gelu_exact
from jaxbert.model.base import Array, BertModule
from jaxbert.model.bert.heads import (BertForMaskedLM, BertForMultipleChoice, BertForQuestionAnswering,
                                      BertForSequenceClassification, BertForTokenClassification)
from jaxbert.model.bert.modules import BertModel


def roberta_positions(input_ids: Array, pad_id: int) -> Array:
    """RoBERTa's position ids [B, L]: real tokens count up from pad_id + 1, padding stays at pad_id.

    As transformers' create_position_ids_from_input_ids, so they depend on where
    the padding is: a left-padded row starts its text at pad_id + 1 too.
    """
    real = (input_ids != pad_id).astype(jnp.int32)
    return jnp.cumsum(real, axis=1) * real + pad_id


class RobertaLMHead(BertModule):
    """dense -> gelu -> layer_norm -> decoder (tied to the word embeddings) + bias.

    transformers' RobertaLMHead uses the exact gelu whatever hidden_act says.
    Args: hidden_states [B, M, H]; word_embeddings [V, H]. Returns logits [B, M, V].
    """

    @nn.compact
    def __call__(self, hidden_states, word_embeddings=None):
        cfg = self.config
        x = self.dense(cfg.hidden_size, ("embed", None), "dense")(hidden_states)
        x = self.layer_norm("layer_norm")(gelu_exact(x))
        return self.vocab_logits(x, word_embeddings)


class RobertaClassificationHead(BertModule):
    """First token -> dropout -> dense -> tanh -> dropout -> out_proj: [B, L, H] -> [B, num_labels].

    RoBERTa's sequence classifier has its own dense layer instead of BERT's pooler.
    """

    @nn.compact
    def __call__(self, hidden_states, deterministic=True):
        cfg = self.config
        rate = cfg.hidden_dropout_prob if cfg.classifier_dropout is None else cfg.classifier_dropout
        x = self.dropout_layer(rate)(hidden_states[:, 0], deterministic=deterministic)
        x = jnp.tanh(self.dense(cfg.hidden_size, ("embed", None), "dense")(x))
        x = self.dropout_layer(rate)(x, deterministic=deterministic)
        return self.dense(cfg.num_labels, ("embed", None), "out_proj")(x)


def position_ids(input_ids: Array, config) -> Array:
    """The family's position ids for a config: counted from its pad_token_id."""
    return roberta_positions(input_ids, config.pad_token_id)


class RobertaModel(BertModel):
    """BertModel for a roberta config."""


class XLMRobertaModel(BertModel):
    """BertModel for a xlm-roberta config."""


class RobertaForMaskedLM(BertForMaskedLM):
    """BertForMaskedLM for a roberta config."""


class XLMRobertaForMaskedLM(BertForMaskedLM):
    """BertForMaskedLM for a xlm-roberta config."""


class RobertaForSequenceClassification(BertForSequenceClassification):
    """BertForSequenceClassification for a roberta config."""


class XLMRobertaForSequenceClassification(BertForSequenceClassification):
    """BertForSequenceClassification for a xlm-roberta config."""


class RobertaForTokenClassification(BertForTokenClassification):
    """BertForTokenClassification for a roberta config."""


class XLMRobertaForTokenClassification(BertForTokenClassification):
    """BertForTokenClassification for a xlm-roberta config."""


class RobertaForQuestionAnswering(BertForQuestionAnswering):
    """BertForQuestionAnswering for a roberta config."""


class XLMRobertaForQuestionAnswering(BertForQuestionAnswering):
    """BertForQuestionAnswering for a xlm-roberta config."""


class RobertaForMultipleChoice(BertForMultipleChoice):
    """BertForMultipleChoice for a roberta config."""


class XLMRobertaForMultipleChoice(BertForMultipleChoice):
    """BertForMultipleChoice for a xlm-roberta config."""


MODEL_CLASSES = {cls.__name__: cls for cls in (
    RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, RobertaForTokenClassification,
    RobertaForQuestionAnswering, RobertaForMultipleChoice,
    XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, XLMRobertaForTokenClassification,
    XLMRobertaForQuestionAnswering, XLMRobertaForMultipleChoice)}
