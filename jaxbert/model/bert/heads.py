"""BERT's task heads on BertModel, with transformers' class and param names, and its classes by name."""

from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn

from jaxbert.model.base import BertModule, ModelOutput
from jaxbert.model.bert.config import BertConfig, bert_class_name
from jaxbert.model.bert.encoder import BertLMPredictionHead
from jaxbert.model.bert.modules import BertModel, BertPreTrainedModel
from jaxbert.model.families import family_of_class, root_class_name
from jaxbert.model.layers.vocab import gather_positions
from jaxbert.model.options import ModelOptions
from jaxbert.model.registry import HEADS, for_config


class _MLMBase(BertPreTrainedModel):
    """Shared by the models with an MLM head: BertForMaskedLM, BertLMHeadModel."""

    def setup(self):
        # setattr: the encoder's attribute (and so param) name is the family's prefix.
        setattr(self, self.config.base_prefix, self._bert(add_pooling_layer=False, name=None))
        family = self.config.family
        # setattr: the head's attribute (and so param) name is the family's ("cls", "lm_head").
        setattr(self, family.mlm_head_name, family.mlm_head(self.config, self.options))

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
        head = getattr(self, self.config.family.mlm_head_name)
        return out.replace(logits=head(hidden, self._word_embeddings()))


class BertOnlyMLMHead(BertModule):
    """BERT's MLM head (transform -> decoder tied to the word embeddings + bias), under "cls/predictions"."""

    @nn.compact
    def __call__(self, hidden_states, word_embeddings):
        return BertLMPredictionHead(self.config, self.options, name="predictions")(hidden_states, word_embeddings)


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
        self.cls = _PreTrainingHeads(self.config, self.options)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, masked_positions=None, deterministic: bool = True,
                 output_hidden_states: bool = False, output_attentions: bool = False, segment_ids=None):
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids, head_mask,
                        deterministic=deterministic, output_hidden_states=output_hidden_states,
                        output_attentions=output_attentions, segment_ids=segment_ids)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = gather_positions(hidden, masked_positions)
        mlm, nsp = self.cls(hidden, out.pooler_output, self._word_embeddings())
        return out.replace(logits=mlm, prediction_logits=mlm, seq_relationship_logits=nsp)


class _PreTrainingHeads(BertModule):
    @nn.compact
    def __call__(self, hidden_states, pooled, word_embeddings):
        mlm = BertLMPredictionHead(self.config, self.options, name="predictions")(hidden_states, word_embeddings)
        nsp = self.dense(2, ("embed", None), "seq_relationship")(pooled)
        return mlm, nsp


class _EncoderHead(BertPreTrainedModel):
    """A head on the encoder's output; the registry says whether the encoder has a pooler.

    A head that reads only the first token's final state says so (reads_first_token); with
    ModelOptions.first_token_only its encoder then runs the last layer at that token alone.
    """

    reads_first_token = False

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        spec = for_config(HEADS[bert_class_name(type(self).__name__)], self.config)
        bert = self._bert(spec.pooler)
        out = bert(input_ids, token_type_ids, attention_mask, position_ids, head_mask,
                   deterministic=deterministic, output_hidden_states=output_hidden_states,
                   output_attentions=output_attentions, segment_ids=segment_ids,
                   first_token_only=self.reads_first_token and self.options.first_token_only)
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

    reads_first_token = True

    def head(self, out, deterministic):
        logits = _OnlyNSPHead(self.config, self.options, name="cls")(out.pooler_output)
        return out.replace(logits=logits, seq_relationship_logits=logits)


class _OnlyNSPHead(BertModule):
    @nn.compact
    def __call__(self, pooled):
        return self.dense(2, ("embed", None), "seq_relationship")(pooled)


class BertForSequenceClassification(_EncoderHead):
    """Pooled output -> logits [B, num_labels]; RoBERTa: the first token through its own head, no pooler."""

    reads_first_token = True

    def head(self, out, deterministic):
        classifier = self.config.family.seq_classifier
        if classifier is not None:  # the family's own head on the first token (RoBERTa's has no pooler)
            logits = classifier(self.config, self.options, name="classifier")(out.last_hidden_state, deterministic)
            return out.replace(logits=logits)
        return out.replace(logits=self.classify(out.pooler_output, self.config.num_labels, deterministic))


class BertForTokenClassification(_EncoderHead):
    """Every token -> logits [B, L, num_labels]; no pooler."""

    def head(self, out, deterministic):
        return out.replace(logits=self.classify(out.last_hidden_state, self.config.num_labels, deterministic))


class BertForMultipleChoice(_EncoderHead):
    """Inputs [B, C, L] (C choices) -> logits [B, C]."""

    reads_first_token = True

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False):
        B, C, L = input_ids.shape
        flat = lambda a: None if a is None else a.reshape(B * C, L)  # [B, C, L] -> [B*C, L]
        out = self._bert(True)(flat(input_ids), flat(token_type_ids), flat(attention_mask),
                               flat(position_ids), head_mask, deterministic=deterministic,
                               output_hidden_states=output_hidden_states,
                               output_attentions=output_attentions,
                               first_token_only=self.options.first_token_only)
        logits = self.classify(out.pooler_output, 1, deterministic).reshape(B, C)
        return out.replace(logits=logits)


class BertForQuestionAnswering(_EncoderHead):
    """Span extraction: start_logits, end_logits [B, L]; no pooler."""

    def head(self, out, deterministic):
        # transformers sizes qa_outputs by num_labels (2 in practice) and reads columns 0 and 1.
        logits = self.dense(self.config.num_labels, ("embed", None), "qa_outputs")(out.last_hidden_state)
        start, end = logits[..., 0], logits[..., 1]
        return out.replace(logits=logits, start_logits=start, end_logits=end)


MODEL_CLASSES = {cls.__name__: cls for cls in (  # the BERT classes; any config family fits them
    BertModel, BertForMaskedLM, BertForPreTraining, BertForNextSentencePrediction,
    BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,
    BertForMultipleChoice, BertLMHeadModel)}


def build_bert_class(model_class: str, config: BertConfig, options: ModelOptions = ModelOptions(), **kwargs):
    """A class on BERT's modules (its family's classes), built: the build of the families on them."""
    family = family_of_class(model_class)
    if family is None:
        raise ValueError(f"model class {model_class!r} is not a class of a family on BERT's modules")
    return family.classes()[model_class](config, options, **kwargs)


_NAMED: dict = {}


def named_classes(family, defined: Mapping = MODEL_CLASSES) -> dict:
    """A family on BERT's modules' classes under its names (``family.class_names()``): the ones its folder
    defines (RoBERTa's jaxbert.model.roberta.modules) where it has them, else a subclass of the BERT class
    each is built from, made once per name (a family registered as a copy of another, as
    ``dataclasses.replace(ROBERTA, name="camembert", ...)`` makes, gets CamembertForMaskedLM, ...).
    ``defined``: the classes its folder defines (BERT's own by default)."""
    out = {}
    for name in family.class_names():
        if name in defined:
            out[name] = defined[name]
            continue
        if name not in _NAMED:
            base = MODEL_CLASSES[root_class_name(name)]
            _NAMED[name] = type(base)(name, (base,), {"__doc__": f"{base.__name__} for a {family.name} config.",
                                                       "__module__": __name__})
        out[name] = _NAMED[name]
    return out
