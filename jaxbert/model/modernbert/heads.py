"""The six ModernBERT classes of transformers 4.57, with its class and parameter names.

Every head class holds the encoder as ``model``; the task heads run it through ``head``
(dense -> classifier_activation -> norm), dropout ``drop`` and ``classifier``; the MLM head
through ``head`` and ``decoder``, the decoder's weight tied to tok_embeddings (its bias its own).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxbert.model.activations import ACT_FNS
from jaxbert.model.base import ModelOutput
from jaxbert.model.layers.vocab import gather_positions
from jaxbert.model.modernbert.base import ModernBertModule
from jaxbert.model.layers.vocab import vocab_decoder
from jaxbert.model.own_classes import encoder_head, no_head_mask
from jaxbert.model.modernbert.modules import ModernBertModel


class ModernBertPredictionHead(ModernBertModule):
    """[..., H] -> norm(act(dense(x))) [..., H]."""

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        x = self.linear(cfg.hidden_size, ("embed", None), "dense", cfg.classifier_bias, self.std_out)(x)
        return self.norm("norm")(ACT_FNS[cfg.classifier_activation](x))


class ModernBertPreTrainedModel(ModernBertModule):
    """Base of the head classes: the encoder under ``model`` and the classifier head."""

    def encode(self, input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
               output_attentions, segment_ids=None) -> ModelOutput:
        return ModernBertModel(self.config, self.options, name="model")(
            input_ids, None, attention_mask, position_ids, None, deterministic=deterministic,
            output_hidden_states=output_hidden_states, output_attentions=output_attentions,
            segment_ids=segment_ids)

    def classify(self, x, features: int, deterministic: bool):
        """head -> drop(classifier_dropout) -> classifier (with bias, as transformers' nn.Linear default)."""
        cfg = self.config
        x = ModernBertPredictionHead(cfg, self.options, name="head")(x)
        x = self.dropout_layer(cfg.classifier_dropout)(x, deterministic=deterministic)
        return self.linear(features, ("embed", None), "classifier", True, self.std_final)(x)


class ModernBertForMaskedLM(ModernBertPreTrainedModel):
    """logits [B, T, V], or [B, M, V] at masked_positions [B, M] only (transformers' sparse_prediction)."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 masked_positions=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        no_head_mask("ModernBERT", head_mask)
        cfg = self.config
        out = self.encode(input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
                          output_attentions, segment_ids)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = gather_positions(hidden, masked_positions)
        x = ModernBertPredictionHead(cfg, self.options, name="head")(hidden)
        return out.replace(logits=self.decoder(x))

    def decoder(self, x):
        """x [B, M, H] -> [B, M, V]: the tied (or own) decoder weight, plus decoder_bias's bias. Inside the
        MLM step's deferred_vocab_logits, where options.vocab_loss_chunk chooses the chunked loss for this
        vocabulary, a VocabProjection of x, that weight and bias instead (jaxbert.model.vocab_loss)."""
        cfg = self.config
        table = None
        if cfg.tie_word_embeddings:
            table = self.get_variable("params", "model")["embeddings"]["tok_embeddings"]["embedding"]
            table = nn.meta.unbox(table).astype(self.options.dtype)
        return vocab_decoder(x, table, name="decoder", vocab_size=cfg.vocab_size, use_bias=cfg.decoder_bias,
                             init=self.trunc_normal(self.std_out), options=self.options)


_EncoderHead = encoder_head(ModernBertPreTrainedModel, "ModernBERT")


class ModernBertForSequenceClassification(_EncoderHead):
    """logits [B, num_labels] from the first token (classifier_pooling 'cls') or the mean over real tokens.
    With segment_ids, 'mean' stays the mean over every real token of the row (all its documents), as
    attention_mask marks them; 'cls' reads the row's first token."""

    def head(self, out, attention_mask, deterministic):
        pooled = pool(out.last_hidden_state, attention_mask, self.config.classifier_pooling, first_real=False)
        return out.replace(logits=self.classify(pooled, self.config.num_labels, deterministic))


class ModernBertForTokenClassification(_EncoderHead):
    """logits [B, T, num_labels]."""

    def head(self, out, attention_mask, deterministic):
        return out.replace(logits=self.classify(out.last_hidden_state, self.config.num_labels, deterministic))


class ModernBertForQuestionAnswering(_EncoderHead):
    """start_logits, end_logits [B, T]: columns 0 and 1 of the classifier's num_labels."""

    def head(self, out, attention_mask, deterministic):
        logits = self.classify(out.last_hidden_state, self.config.num_labels, deterministic)
        return out.replace(logits=logits, start_logits=logits[..., 0], end_logits=logits[..., 1])


class ModernBertForMultipleChoice(ModernBertPreTrainedModel):
    """Inputs [B, C, T] -> logits [B, C]. 'cls' pooling reads each row's first real token
    (transformers takes the argmax of the attention mask, so left padding is skipped)."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None):
        no_head_mask("ModernBERT", head_mask)
        B, C, T = input_ids.shape
        flat = lambda a: None if a is None else a.reshape(B * C, T)  # noqa: E731 [B, C, T] -> [B*C, T]
        mask = flat(attention_mask)
        out = self.encode(flat(input_ids), mask, flat(position_ids), deterministic, output_hidden_states,
                          output_attentions, flat(segment_ids))
        pooled = pool(out.last_hidden_state, mask, self.config.classifier_pooling, first_real=True)
        return out.replace(logits=self.classify(pooled, 1, deterministic).reshape(B, C))


def pool(hidden, attention_mask, how: str, first_real: bool):
    """[B, T, H] -> [B, H]: 'cls' the first token (first_real: the first unmasked one), 'mean' the
    mean over the tokens attention_mask [B, T] marks real (all of them when it is None)."""
    if attention_mask is None:
        attention_mask = jnp.ones(hidden.shape[:2], jnp.int32)
    if how == "cls":
        if not first_real:
            return hidden[:, 0]
        first = jnp.argmax(attention_mask, axis=-1)
        return jnp.take_along_axis(hidden, first[:, None, None], axis=1)[:, 0]
    m = attention_mask.astype(hidden.dtype)[..., None]
    return (hidden * m).sum(axis=1) / m.sum(axis=1)


MODEL_CLASSES = {cls.__name__: cls for cls in (
    ModernBertModel, ModernBertForMaskedLM, ModernBertForSequenceClassification, ModernBertForTokenClassification,
    ModernBertForQuestionAnswering, ModernBertForMultipleChoice)}
