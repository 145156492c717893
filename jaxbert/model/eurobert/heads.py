"""The four EuroBERT classes of transformers 5, with its class and parameter names.

Every head class holds the encoder as ``model``. The masked LM reads the final norm's output through
``lm_head`` (its own weight, tied to embed_tokens when tie_word_embeddings; a bias only with mlp_bias). The
sequence classifier runs ``dense`` -> GELU -> ``classifier`` on the first token ("bos"), on the mean of the
real tokens ("mean"), or on every token and then takes the mean of the real tokens' logits ("late",
EuroBERT's default); the token classifier is ``classifier`` alone. No head has dropout.
"""

from __future__ import annotations

import flax.linen as nn

from jaxbert.model.activations import ACT_FNS
from jaxbert.model.layers.vocab import gather_positions
from jaxbert.model.eurobert.modules import EuroBertModel, EuroBertModule
from jaxbert.model.layers.vocab import vocab_decoder
from jaxbert.model.own_classes import encoder_head, no_head_mask


class EuroBertPreTrainedModel(EuroBertModule):
    """Base of the head classes: the encoder under ``model``."""

    def encode(self, input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
               output_attentions, segment_ids=None):
        return EuroBertModel(self.config, self.options, name="model")(
            input_ids, None, attention_mask, position_ids, None, deterministic=deterministic,
            output_hidden_states=output_hidden_states, output_attentions=output_attentions, segment_ids=segment_ids)


class EuroBertForMaskedLM(EuroBertPreTrainedModel):
    """logits [B, T, V], or [B, M, V] at masked_positions [B, M] only."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 masked_positions=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        no_head_mask("EuroBERT", head_mask)
        out = self.encode(input_ids, attention_mask, position_ids, deterministic, output_hidden_states,
                          output_attentions, segment_ids)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = gather_positions(hidden, masked_positions)
        return out.replace(logits=self.lm_head(hidden))

    def lm_head(self, x):
        """x [B, M, H] -> [B, M, V]: lm_head's weight (embed_tokens' table when tied) and, with mlp_bias, its
        bias. Inside the MLM step's deferred_vocab_logits, where options.vocab_loss_chunk chooses the chunked
        loss for this vocabulary (128,256 entries by default: it does), a VocabProjection of x, that weight and
        bias instead (jaxbert.model.vocab_loss): the same params."""
        cfg, opts = self.config, self.options
        table = None
        if cfg.tie_word_embeddings:
            table = nn.meta.unbox(self.get_variable("params", "model")["embed_tokens"]["embedding"]).astype(opts.dtype)
        return vocab_decoder(x, table, name="lm_head", vocab_size=cfg.vocab_size, use_bias=cfg.mlp_bias,
                             init=nn.initializers.normal(cfg.initializer_range), options=opts)


_EncoderHead = encoder_head(EuroBertPreTrainedModel, "EuroBERT")


class EuroBertForSequenceClassification(_EncoderHead):
    """logits [B, num_labels] by classifier_pooling: "bos" the first token, "mean" the mean over the real tokens,
    then dense -> GELU -> classifier; "late" dense -> GELU -> classifier at every token, then the mean of the
    real tokens' logits. With segment_ids the means stay over every real token of the row (all its documents),
    as attention_mask marks them; "bos" reads the row's first token."""

    def head(self, out, attention_mask, deterministic):
        cfg = self.config
        dense = self.dense(cfg.hidden_size, ("embed", None), "dense")
        classifier = self.dense(cfg.num_labels, ("embed", None), "classifier")
        classify = lambda x: classifier(ACT_FNS["gelu"](dense(x)))  # noqa: E731 (nn.GELU(): the erf form)
        hidden = out.last_hidden_state
        if cfg.classifier_pooling == "late":
            return out.replace(logits=masked_mean(classify(hidden), attention_mask))
        pooled = hidden[:, 0] if cfg.classifier_pooling == "bos" else masked_mean(hidden, attention_mask)
        return out.replace(logits=classify(pooled))


class EuroBertForTokenClassification(_EncoderHead):
    """logits [B, T, num_labels]."""

    def head(self, out, attention_mask, deterministic):
        classifier = self.dense(self.config.num_labels, ("embed", None), "classifier")
        return out.replace(logits=classifier(out.last_hidden_state))


def masked_mean(x, attention_mask):
    """[B, T, F] -> [B, F]: the sum over the tokens attention_mask [B, T] marks real, divided by their count
    (as transformers takes it: a sum, then a division); every token's when attention_mask is None."""
    if attention_mask is None:
        return x.mean(axis=1)
    m = attention_mask.astype(x.dtype)[..., None]
    return (x * m).sum(axis=1) / m.sum(axis=1)


MODEL_CLASSES = {cls.__name__: cls for cls in (
    EuroBertModel, EuroBertForMaskedLM, EuroBertForSequenceClassification, EuroBertForTokenClassification)}
