"""BertModel and the task heads, with transformers' class and param names."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model.encoder import (BertEmbeddings, BertEncoder, BertLMPredictionHead, BertPooler,
                       gather_positions)
from jaxbert.model.attention import padding_mask
from jaxbert.model.config import ConfigError, bert_class_name
from jaxbert.model.roberta import RobertaClassificationHead, RobertaLMHead
from jaxbert.model.layers import Array, BertModule, ModelOutput, validate_options
from jaxbert.model.registry import HEADS, for_config


class BertPreTrainedModel(BertModule):
    """Base of the public models.

    ``init`` returns plain arrays named as in transformers; ``init_boxed`` keeps
    the logical-axis metadata (nn.Partitioned) that training shards by.
    """

    def init_boxed(self, rngs, *args, **kwargs):
        return nn.Module.init(self, rngs, *args, **kwargs)

    def init(self, rngs, *args, **kwargs):
        return nn.meta.unbox(self.init_boxed(rngs, *args, **kwargs))

    def _bert(self, add_pooling_layer: bool, name: Optional[str] = ""):
        """The encoder, named after the family ('bert', 'roberta'); name=None inside setup."""
        self._check_family()
        name = self.config.base_prefix if name == "" else name
        return BertModel(**self.options(), add_pooling_layer=add_pooling_layer, name=name)

    def _check_family(self):
        """Bert* classes take their family from the config; Roberta* ones need a RoBERTa config."""
        name = type(self).__name__
        self.config.class_name(name)  # refuses heads the family lacks (RobertaForPreTraining)
        if name != bert_class_name(name) and not self.config.is_roberta:
            raise ConfigError(f"{name} needs model_type 'roberta' or 'xlm-roberta', "
                              f"not {self.config.model_type!r}")

    def _word_embeddings(self) -> Array:
        base = getattr(self, self.config.base_prefix)
        return nn.meta.unbox(base.variables["params"]["embeddings"]["word_embeddings"]["embedding"])


class BertModel(BertPreTrainedModel):
    """The encoder. Call with input_ids [B, L] (and optionally token_type_ids,
    attention_mask, position_ids [B, L], head_mask [N] or [num_layers, N]).

    When config.is_decoder is set, self-attention is causal; with
    add_cross_attention, encoder_hidden_states [B, S, H] (masked by
    encoder_attention_mask [B, S]) feed each layer's crossattention block.
    With ``decode=True`` (see jaxbert.infer.generate), keys and values are cached:
    attention_mask then covers the whole cache [B, max_len].
    """

    add_pooling_layer: bool = True

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False):
        validate_options(self)
        cfg = self.config
        B, L = input_ids.shape
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        # [B, 1, 1, S]; under decode S is the cache length, as the mask given must be.
        mask = padding_mask(attention_mask, B, L)
        encoder_mask = None
        if encoder_attention_mask is not None or encoder_hidden_states is not None:
            S = (encoder_hidden_states.shape[1] if encoder_hidden_states is not None
                 else encoder_attention_mask.shape[1])
            encoder_mask = padding_mask(encoder_attention_mask, B, S)
        if head_mask is not None:
            head_mask = jnp.asarray(head_mask)
            if head_mask.ndim == 1:  # the same mask for every layer
                head_mask = jnp.broadcast_to(head_mask, (cfg.num_hidden_layers, cfg.num_attention_heads))

        x = BertEmbeddings(**self.options(), name="embeddings")(
            input_ids, token_type_ids, position_ids, deterministic)
        last, layer_states, (attn, cross) = BertEncoder(**self.options(), name="encoder")(
            x, mask, head_mask, encoder_hidden_states, encoder_mask, deterministic,
            output_hidden_states, output_attentions)
        pooled = BertPooler(**self.options(), name="pooler")(last) if self.add_pooling_layer else None
        return ModelOutput(
            last_hidden_state=last, pooler_output=pooled,
            hidden_states=(x,) + layer_states if output_hidden_states else None,
            attentions=attn, cross_attentions=cross)


class _MLMBase(BertPreTrainedModel):
    """Shared by the models with an MLM head: BertForMaskedLM, BertLMHeadModel."""

    def setup(self):
        # setattr: the encoder's attribute (and so param) name is the family's prefix.
        setattr(self, self.config.base_prefix, self._bert(add_pooling_layer=False, name=None))
        if self.config.is_roberta:
            self.lm_head = RobertaLMHead(**self.options())
        else:
            self.cls = _OnlyMLMHead(**self.options())

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, masked_positions=None, deterministic: bool = True,
                 output_hidden_states: bool = False, output_attentions: bool = False, **kwargs):
        """Returns logits [B, L, V], or [B, M, V] for masked_positions [B, M] only."""
        out = getattr(self, self.config.base_prefix)(input_ids, token_type_ids, attention_mask, position_ids, head_mask,
                        deterministic=deterministic, output_hidden_states=output_hidden_states,
                        output_attentions=output_attentions, **kwargs)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = gather_positions(hidden, masked_positions)
        head = self.lm_head if self.config.is_roberta else self.cls
        return out.replace(logits=head(hidden, self._word_embeddings()))


class _OnlyMLMHead(BertModule):
    @nn.compact
    def __call__(self, hidden_states, word_embeddings):
        return BertLMPredictionHead(**self.options(), name="predictions")(hidden_states, word_embeddings)


class BertForMaskedLM(_MLMBase):
    """BERT with the MLM head and no pooler, as transformers' BertForMaskedLM."""


class BertLMHeadModel(_MLMBase):
    """The causal-LM head on a decoder BertModel (config.is_decoder must be True)."""

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, encoder_hidden_states=None, encoder_attention_mask=None, **kwargs):
        if not self.config.is_decoder:
            raise ValueError("BertLMHeadModel needs config.is_decoder=True")
        return super().__call__(input_ids, token_type_ids, attention_mask, position_ids, head_mask,
                                encoder_hidden_states=encoder_hidden_states,
                                encoder_attention_mask=encoder_attention_mask, **kwargs)


class BertForPreTraining(BertPreTrainedModel):
    """MLM + next-sentence prediction. prediction_logits [B, L or M, V],
    seq_relationship_logits [B, 2]."""

    def setup(self):
        self.bert = self._bert(add_pooling_layer=True, name=None)
        self.cls = _PreTrainingHeads(**self.options())

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, masked_positions=None, deterministic: bool = True,
                 output_hidden_states: bool = False, output_attentions: bool = False):
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids, head_mask,
                        deterministic=deterministic, output_hidden_states=output_hidden_states,
                        output_attentions=output_attentions)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = gather_positions(hidden, masked_positions)
        mlm, nsp = self.cls(hidden, out.pooler_output, self._word_embeddings())
        return out.replace(logits=mlm, prediction_logits=mlm, seq_relationship_logits=nsp)


class _PreTrainingHeads(BertModule):
    @nn.compact
    def __call__(self, hidden_states, pooled, word_embeddings):
        mlm = BertLMPredictionHead(**self.options(), name="predictions")(hidden_states, word_embeddings)
        nsp = self.dense(2, ("embed", None), "seq_relationship")(pooled)
        return mlm, nsp


class _EncoderHead(BertPreTrainedModel):
    """A head on the encoder's output; the registry says whether the encoder has a pooler."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False):
        spec = for_config(HEADS[bert_class_name(type(self).__name__)], self.config)
        bert = self._bert(spec.pooler)
        out = bert(input_ids, token_type_ids, attention_mask, position_ids, head_mask,
                   deterministic=deterministic, output_hidden_states=output_hidden_states,
                   output_attentions=output_attentions)
        return self.head(out, deterministic)

    def head(self, out: ModelOutput, deterministic: bool) -> ModelOutput:
        raise NotImplementedError

    def classify(self, x, features, deterministic):
        """dropout(classifier_dropout or hidden_dropout) -> Dense 'classifier'."""
        cfg = self.config
        rate = cfg.hidden_dropout_prob if cfg.classifier_dropout is None else cfg.classifier_dropout
        x = self.dropout_layer(rate)(x, deterministic=deterministic)
        return self.dense(features, ("embed", None), "classifier")(x)


class BertForNextSentencePrediction(_EncoderHead):
    """logits [B, 2]: 0 = B follows A, 1 = B is random."""

    def head(self, out, deterministic):
        logits = _OnlyNSPHead(**self.options(), name="cls")(out.pooler_output)
        return out.replace(logits=logits, seq_relationship_logits=logits)


class _OnlyNSPHead(BertModule):
    @nn.compact
    def __call__(self, pooled):
        return self.dense(2, ("embed", None), "seq_relationship")(pooled)


class BertForSequenceClassification(_EncoderHead):
    """Pooled output -> logits [B, num_labels]; RoBERTa: the first token through its own head, no pooler."""

    def head(self, out, deterministic):
        if self.config.is_roberta:
            logits = RobertaClassificationHead(**self.options(), name="classifier")(out.last_hidden_state,
                                                                                   deterministic)
            return out.replace(logits=logits)
        return out.replace(logits=self.classify(out.pooler_output, self.config.num_labels, deterministic))


class BertForTokenClassification(_EncoderHead):
    """Every token -> logits [B, L, num_labels]; no pooler."""

    def head(self, out, deterministic):
        return out.replace(logits=self.classify(out.last_hidden_state, self.config.num_labels, deterministic))


class BertForMultipleChoice(_EncoderHead):
    """Inputs [B, C, L] (C choices) -> logits [B, C]."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False):
        B, C, L = input_ids.shape
        flat = lambda a: None if a is None else a.reshape(B * C, L)  # [B, C, L] -> [B*C, L]
        out = self._bert(True)(flat(input_ids), flat(token_type_ids), flat(attention_mask),
                               flat(position_ids), head_mask, deterministic=deterministic,
                               output_hidden_states=output_hidden_states,
                               output_attentions=output_attentions)
        logits = self.classify(out.pooler_output, 1, deterministic).reshape(B, C)
        return out.replace(logits=logits)


class BertForQuestionAnswering(_EncoderHead):
    """Span extraction: start_logits, end_logits [B, L]; no pooler."""

    def head(self, out, deterministic):
        # transformers sizes qa_outputs by num_labels (2 in practice) and reads columns 0 and 1.
        logits = self.dense(self.config.num_labels, ("embed", None), "qa_outputs")(out.last_hidden_state)
        start, end = logits[..., 0], logits[..., 1]
        return out.replace(logits=logits, start_logits=start, end_logits=end)


def _family_class(base, prefix: str):
    """The same module under a family's class name (the config decides the layout)."""
    name, doc = prefix + base.__name__[len("Bert"):], f"{base.__name__} for a roberta / xlm-roberta config."
    return type(name, (base,), {"__module__": __name__, "__qualname__": name, "__doc__": doc})


_ROBERTA_BASES = (BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification,
                  BertForQuestionAnswering, BertForMultipleChoice)
(RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, RobertaForTokenClassification,
 RobertaForQuestionAnswering, RobertaForMultipleChoice) = (_family_class(b, "Roberta") for b in _ROBERTA_BASES)
(XLMRobertaModel, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification, XLMRobertaForTokenClassification,
 XLMRobertaForQuestionAnswering, XLMRobertaForMultipleChoice) = (_family_class(b, "XLMRoberta") for b in _ROBERTA_BASES)

MODEL_CLASSES = {cls.__name__: cls for cls in (  # the BERT classes; any config family fits them
    BertModel, BertForMaskedLM, BertForPreTraining, BertForNextSentencePrediction,
    BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,
    BertForMultipleChoice, BertLMHeadModel)}
ALL_MODEL_CLASSES = dict(MODEL_CLASSES, **{cls.__name__: cls for cls in (  # + those of the RoBERTa family
    RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, RobertaForTokenClassification,
    RobertaForQuestionAnswering, RobertaForMultipleChoice, XLMRobertaModel, XLMRobertaForMaskedLM,
    XLMRobertaForSequenceClassification, XLMRobertaForTokenClassification, XLMRobertaForQuestionAnswering,
    XLMRobertaForMultipleChoice)})


def dummy_inputs(model_cls_or_name, batch: int = 1, length: int = 8) -> tuple:
    """Integer inputs shaped for init (multiple choice wants [B, C, L])."""
    name = model_cls_or_name if isinstance(model_cls_or_name, str) else model_cls_or_name.__name__
    shape = (batch, 2, length) if HEADS[bert_class_name(name)].choices else (batch, length)
    return jnp.zeros(shape, jnp.int32), jnp.zeros(shape, jnp.int32)


def param_count(params) -> int:
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
