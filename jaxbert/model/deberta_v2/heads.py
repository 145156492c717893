"""The six DeBERTa-v2 classes of transformers (4.57 and 5.x), with its class and parameter names.

Every head class holds the encoder as ``deberta``. The masked LM has two layouts, by the config's ``legacy``:
true (transformers' default) ``cls.predictions`` (transform: dense H -> embedding_size, act, LayerNorm; the decoder
tied to word_embeddings; bias), false ``lm_predictions.lm_head`` (dense H -> H, act, LayerNorm; times the word
embeddings; bias), the layout of the original DeBERTa code's MLM head. Sequence classification and multiple
choice read the first token through the ContextPooler (dropout of pooler_dropout, ``pooler.dense``,
pooler_hidden_act) and a dropout of cls_dropout (hidden_dropout_prob where None) before ``classifier``; token
classification: dropout, ``classifier``; question answering: ``qa_outputs`` (start and end: its columns 0, 1).

DebertaV2ForReplacedTokenDetection is jaxbert's own (transformers has no DeBERTa RTD head): DeBERTa-v3's
discriminator, its head ``mask_predictions`` as the original DeBERTa code's RTD head lays it out: LayerNorm(each
token's state + the first token's), dense H -> H, hidden_act, ``classifier`` H -> 1: one logit per token [B, T]
(> 0: replaced).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxbert.model.activations import ACT_FNS
from jaxbert.model.deberta_v2.base import DebertaV2Module
from jaxbert.model.deberta_v2.modules import DebertaV2Model
from jaxbert.model.layers.vocab import vocab_decoder
from jaxbert.model.own_classes import no_head_mask

FAMILY = "DeBERTa-v2"


def _transform(module: DebertaV2Module, x, features: int):
    """dense (H -> features) -> hidden_act -> LayerNorm, created in `module` (a compact method's)."""
    cfg = module.config
    return module.layer_norm()(ACT_FNS[cfg.hidden_act](module.dense(features, ("embed", None), "dense")(x)))


class _Transform(DebertaV2Module):
    features: int = 0

    @nn.compact
    def __call__(self, x):
        return _transform(self, x, self.features)


class _MLMHead(DebertaV2Module):
    """``predictions`` (legacy: its transform a module of its own) or ``lm_head`` (dense and LayerNorm in it):
    the transform, then the tied decoder and the head's bias. Returns logits, or inside the MLM step's
    deferred_vocab_logits the chunked loss's VocabProjection (jaxbert.model.vocab_loss): the same params."""

    @nn.compact
    def __call__(self, x, table):
        cfg, opts = self.config, self.options
        if cfg.legacy:
            x = _Transform(cfg, opts, features=cfg.embed_size, name="transform")(x)
        else:
            x = _transform(self, x, cfg.hidden_size)
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (cfg.vocab_size,), opts.param_dtype).astype(opts.dtype)
        return vocab_decoder(x, table, name="decoder", vocab_size=cfg.vocab_size, use_bias=False,
                             init=nn.initializers.normal(cfg.initializer_range), options=opts, bias=bias)


class _MLMOuter(DebertaV2Module):
    """``cls`` holding ``predictions`` (legacy) or ``lm_predictions`` holding ``lm_head``."""

    @nn.compact
    def __call__(self, x, table):
        return _MLMHead(self.config, self.options, name="predictions" if self.config.legacy else "lm_head")(x, table)


class _ContextPooler(DebertaV2Module):
    @nn.compact
    def __call__(self, x, deterministic):
        cfg = self.config
        x = self.dropout_layer(cfg.pooler_dropout)(x[:, 0], deterministic=deterministic)
        return ACT_FNS[cfg.pooler_hidden_act](self.dense(cfg.pooler_size, ("embed", None), "dense")(x))


class DebertaV2PreTrainedModel(DebertaV2Module):
    """Base of the head classes: the encoder under ``deberta``."""

    def encode(self, input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
               output_attentions, segment_ids=None, token_type_ids=None):
        return DebertaV2Model(self.config, self.options, name="deberta")(
            input_ids, token_type_ids, attention_mask, position_ids, None, deterministic=deterministic,
            output_hidden_states=output_hidden_states, output_attentions=output_attentions, segment_ids=segment_ids)

    def classify(self, hidden, features: int, deterministic: bool):
        """ContextPooler on the first token -> dropout (cls_dropout) -> classifier [.., features]."""
        x = _ContextPooler(self.config, self.options, name="pooler")(hidden, deterministic)
        x = self.dropout_layer(self.config.classifier_dropout)(x, deterministic=deterministic)
        return self.dense(features, ("embed", None), "classifier")(x)


class DebertaV2ForMaskedLM(DebertaV2PreTrainedModel):
    """logits [B, T, V], or [B, M, V] at masked_positions [B, M] only."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 masked_positions=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        no_head_mask(FAMILY, head_mask)
        out = self.encode(input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
                          output_attentions, segment_ids, token_type_ids)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = jnp.take_along_axis(hidden, masked_positions[..., None].astype(jnp.int32), axis=1)
        return out.replace(logits=self.lm_head(hidden))

    def lm_head(self, x):
        """x [B, M, H] -> [B, M, V] through the config's layout."""
        cfg = self.config
        table = self.get_variable("params", "deberta")["embeddings"]["word_embeddings"]["embedding"]
        table = nn.meta.unbox(table).astype(self.options.dtype)
        return _MLMOuter(cfg, self.options, name="cls" if cfg.legacy else "lm_predictions")(x, table)


class _EncoderHead(DebertaV2PreTrainedModel):
    """The encoder (token types passed on), then the class's ``head``."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None):
        no_head_mask(FAMILY, head_mask)
        out = self.encode(input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
                          output_attentions, segment_ids, token_type_ids)
        return self.head(out, deterministic)


class DebertaV2ForSequenceClassification(_EncoderHead):
    """logits [B, num_labels] from the first token through the ContextPooler."""

    def head(self, out, deterministic):
        return out.replace(logits=self.classify(out.last_hidden_state, self.config.num_labels, deterministic))


class DebertaV2ForTokenClassification(_EncoderHead):
    """logits [B, T, num_labels]."""

    def head(self, out, deterministic):
        cfg = self.config
        x = self.dropout_layer(cfg.hidden_dropout_prob)(out.last_hidden_state, deterministic=deterministic)
        return out.replace(logits=self.dense(cfg.num_labels, ("embed", None), "classifier")(x))


class DebertaV2ForQuestionAnswering(_EncoderHead):
    """start_logits, end_logits [B, T]: columns 0 and 1 of qa_outputs' num_labels."""

    def head(self, out, deterministic):
        logits = self.dense(self.config.num_labels, ("embed", None), "qa_outputs")(out.last_hidden_state)
        return out.replace(logits=logits, start_logits=logits[..., 0], end_logits=logits[..., 1])


class DebertaV2ForMultipleChoice(DebertaV2PreTrainedModel):
    """Inputs [B, C, T] -> logits [B, C]: each choice's first token through the ContextPooler, classifier [H, 1]."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None):
        no_head_mask(FAMILY, head_mask)
        B, C, T = input_ids.shape
        flat = lambda a: None if a is None else a.reshape(B * C, T)
        out = self.encode(flat(input_ids), flat(attention_mask), flat(position_ids), deterministic,
                          output_hidden_states, output_attentions, flat(segment_ids), flat(token_type_ids))
        return out.replace(logits=self.classify(out.last_hidden_state, 1, deterministic).reshape(B, C))


class _RtdHead(DebertaV2Module):
    """[B, T, H] -> [B, T]: LayerNorm(h + h[:, 0]) -> dense -> hidden_act -> classifier (one logit)."""

    @nn.compact
    def __call__(self, hidden):
        cfg = self.config
        x = self.layer_norm()(hidden + hidden[:, :1])
        x = ACT_FNS[cfg.hidden_act](self.dense(cfg.hidden_size, ("embed", None), "dense")(x))
        return self.dense(1, ("embed", None), "classifier")(x)[..., 0]


class DebertaV2ForReplacedTokenDetection(_EncoderHead):
    """The discriminator of DeBERTa-v3's replaced-token detection: logits [B, T], one per token (> 0: replaced)."""

    def head(self, out, deterministic):
        return out.replace(logits=_RtdHead(self.config, self.options, name="mask_predictions")(out.last_hidden_state))


MODEL_CLASSES = {cls.__name__: cls for cls in (
    DebertaV2Model, DebertaV2ForMaskedLM, DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification,
    DebertaV2ForQuestionAnswering, DebertaV2ForMultipleChoice, DebertaV2ForReplacedTokenDetection)}
