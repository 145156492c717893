"""RoBERTa and XLM-RoBERTa: BERT's encoder under "roberta.", positions counted from the padding
index, an MLM head named lm_head, a classifier with its own dense layer, no NSP head."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxbert.errors import ConfigError
from jaxbert.model.activations import gelu_exact
from jaxbert.model.base import Array, BertModule
from jaxbert.model.families.spec import Family


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


def _mlm_rows(c) -> list:
    H = c.hidden_size
    rows = [("lm_head.dense", "dense", (H, H)), ("lm_head.layer_norm", "norm", (H,)),
            ("lm_head", "bias", (c.vocab_size,))]
    if not c.tie_word_embeddings:
        rows.append(("lm_head.decoder", "dense_nobias", (H, c.vocab_size)))
    return rows


def _check(config) -> None:
    from_pad = isinstance(config.pad_token_id, int) and not isinstance(config.pad_token_id, bool)
    if not from_pad:
        raise ConfigError(f"pad_token_id must be an integer for model_type {config.model_type!r} (its positions "
                           f"start at pad_token_id + 1), got {config.pad_token_id!r}")
    if config.max_position_embeddings <= config.pad_token_id + 1:
        raise ConfigError(f"max_position_embeddings ({config.max_position_embeddings}) leaves no room for "
                           f"{config.model_type} positions, which start at pad_token_id + 1")


ROBERTA = Family(
    name="roberta", model_types=("roberta", "xlm-roberta"),
    class_prefixes={"roberta": "Roberta", "xlm-roberta": "XLMRoberta"}, prefix="roberta",
    heads=("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
           "ForMultipleChoice"),
    mlm_rows=_mlm_rows, mlm_decoder="lm_head.decoder", mlm_bias="lm_head.bias",
    position_offset=lambda config: (config.pad_token_id or 0) + 1, position_ids=lambda input_ids, config: roberta_positions(input_ids, config.pad_token_id),
    zero_position_pad=True, check_config=_check, pad_is_position_origin=True,
    mlm_head=RobertaLMHead, mlm_head_name="lm_head",
    seq_classifier=RobertaClassificationHead,
    seq_classifier_rows=lambda c: [("classifier.dense", "dense", (c.hidden_size, c.hidden_size)),
                                   ("classifier.out_proj", "dense", (c.hidden_size, c.num_labels))],
    pretraining_classes=("RobertaForMaskedLM", "XLMRobertaForMaskedLM"))
