"""BertModel, the encoder every head builds on, and BertPreTrainedModel, the base of the public models."""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.errors import ConfigError
from jaxbert.model import fused
from jaxbert.model.base import Array, BertModule, ModelOutput
from jaxbert.model.layers import attention
from jaxbert.model.bert.attention import padding_mask
from jaxbert.model.bert.config import bert_class_name
from jaxbert.model.bert.encoder import BertEmbeddings, BertEncoder, BertPooler
from jaxbert.model.families import family_of_class
from jaxbert.model.segments import segment_mask, segment_positions


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
        return BertModel(self.config, self.options, add_pooling_layer=add_pooling_layer, name=name)

    def _check_family(self):
        """Bert* classes take their family from the config; Roberta* ones need a RoBERTa config."""
        name = type(self).__name__
        self.config.class_name(name)  # refuses heads the family lacks (RobertaForPreTraining)
        own = family_of_class(name)
        if name != bert_class_name(name) and own is not self.config.family:
            raise ConfigError(f"{name} needs model_type {own.needs()}, not {self.config.model_type!r}")

    def _word_embeddings(self) -> Array:
        base = getattr(self, self.config.base_prefix)
        return nn.meta.unbox(base.variables["params"]["embeddings"]["word_embeddings"]["embedding"])


class BertModel(BertPreTrainedModel):
    """The encoder. Call with input_ids [B, L] (and optionally token_type_ids,
    attention_mask, position_ids [B, L], head_mask [N] or [num_layers, N]).

    segment_ids [B, L] (packed rows: 0 = padding, 1..k = the documents of a row; see
    jaxbert.model.segments): attention stays within each document and positions restart at each
    document's start (unless position_ids are given); None computes as an unpacked row.

    When config.is_decoder is set, self-attention is causal; with
    add_cross_attention, encoder_hidden_states [B, S, H] (masked by
    encoder_attention_mask [B, S]) feed each layer's crossattention block.
    With ``decode=True`` (see jaxbert.infer.generate), keys and values are cached:
    attention_mask then covers the whole cache [B, max_len].
    """

    add_pooling_layer: bool = True

    @staticmethod
    def _self_mask(attention_mask, segment_ids, fused_path: bool, B: int, L: int):
        """What the layers' self-attention attends by, formed once for the stack. On a fused path
        (jaxbert.model.fused): int32 segment ids [B, L], from attention_mask [B, L] and segment_ids; a 3-D
        attention_mask [B, L, L] must then be block-diagonal (documents as contiguous runs, padding attending
        nothing), else refused. Otherwise bool [B, 1, 1, S] (padding; under decode S is the cache length, as
        the mask given must be), or [B, 1, L, L] within each document or as a 3-D attention_mask gives it."""
        full = attention_mask is not None and jnp.ndim(attention_mask) == 3
        if full:
            mask = jnp.asarray(attention_mask).astype(bool)[:, None]
            if segment_ids is not None:
                mask = mask & segment_mask(segment_ids)[:, None]
            if not fused_path:
                return mask
            segments = fused.key_segments(mask, L)
            same = (_segments_mask(segments) == mask[:, 0]) | (segments <= 0)[:, :, None]  # padding rows: any
            try:
                block_diagonal = bool(jnp.all(same))
            except jax.errors.ConcretizationTypeError:  # traced (under jit): not known
                block_diagonal = False
            if not block_diagonal:
                raise ValueError("attention_mask [B, T, T]: the fused attention paths (attention_impl blocked, splash, "
                                 "auto) take only a block-diagonal mask known before tracing; pass segment_ids, or "
                                 "attention_impl='einsum'")
            return segments
        if fused_path:
            return attention.layer_mask(True, attention_mask, segment_ids, (B, L))
        mask = padding_mask(attention_mask, B, L)
        return mask if segment_ids is None else mask & segment_mask(segment_ids)[:, None]

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 head_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None, first_token_only: bool = False):
        cfg = self.config
        B, L = input_ids.shape
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if segment_ids is not None:
            if self.options.decode or cfg.is_decoder:
                raise ValueError("segment_ids (packed documents) are for encoders; decoding does not take them")
            if position_ids is None:  # each document counts its positions from the family's origin
                family = cfg.family
                position_ids = segment_positions(
                    segment_ids, family.position_offset(cfg),
                    cfg.pad_token_id if family.zero_position_pad else 0)
        fused_path = (head_mask is None and not first_token_only and cfg.position_embedding_type == "absolute"
                      and not cfg.is_decoder and not self.options.decode
                      and attention.takes_fused(self.options, cfg.attention_probs_dropout_prob, deterministic,
                                                output_attentions))
        mask = self._self_mask(attention_mask, segment_ids, fused_path, B, L)
        encoder_mask = None
        if encoder_attention_mask is not None or encoder_hidden_states is not None:
            S = (encoder_hidden_states.shape[1] if encoder_hidden_states is not None
                 else encoder_attention_mask.shape[1])
            encoder_mask = padding_mask(encoder_attention_mask, B, S)
        if head_mask is not None:
            head_mask = jnp.asarray(head_mask)
            if head_mask.ndim == 1:  # the same mask for every layer
                head_mask = jnp.broadcast_to(head_mask, (cfg.num_hidden_layers, cfg.num_attention_heads))

        x = BertEmbeddings(self.config, self.options, name="embeddings")(
            input_ids, token_type_ids, position_ids, deterministic)
        last, layer_states, (attn, cross) = BertEncoder(self.config, self.options, name="encoder")(
            x, mask, head_mask, encoder_hidden_states, encoder_mask, deterministic,
            output_hidden_states, output_attentions, first_token_only)
        pooled = BertPooler(self.config, self.options, name="pooler")(last) if self.add_pooling_layer else None
        return ModelOutput(
            last_hidden_state=last, pooler_output=pooled,
            hidden_states=(x,) + layer_states if output_hidden_states else None,
            attentions=attn, cross_attentions=cross)


def _segments_mask(segments):
    """bool [B, T, T] of int32 segment ids (fused.PAD_SEGMENT and 0: padding, attending nothing and attended by
    nothing): True where query and key are real tokens of one segment."""
    real = (segments != 0) & (segments != fused.PAD_SEGMENT)
    return (segments[:, :, None] == segments[:, None, :]) & real[:, :, None] & real[:, None, :]
