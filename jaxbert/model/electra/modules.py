"""ELECTRA's encoder in flax.linen under transformers' parameter names: BERT's modules, with embeddings of their
own width.

The word, position and token-type tables and the embeddings' LayerNorm are ``embedding_size`` wide (BERT's
embeddings module, its tables made at that width); when ``embedding_size`` differs from ``hidden_size`` a Linear
``embeddings_project`` takes them to ``hidden_size``. The layer stack is BERT's post-LN encoder as it is
(jaxbert.model.bert.encoder.BertEncoder: its attention paths, scan, remat, blocks of tokens). No pooler.

Param tree (base model; the head classes hold it under ``electra``):
  embeddings/{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}, embeddings_project
  (only when the widths differ), encoder/layer/{0, 1, ...}/... as BERT's (scanned: encoder/layer with a
  leading axis of L).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxbert.model.base import BertModule, ModelOutput
from jaxbert.model.bert.attention import padding_mask
from jaxbert.model.bert.encoder import BertEmbeddings, BertEncoder
from jaxbert.model.segments import segment_mask, segment_positions


class ElectraModule(BertModule):
    """config: an ElectraConfig; options: ModelOptions. transformers' init: every Linear and the embeddings
    normal(initializer_range), biases zero, LayerNorm weights one (BertModule's helpers)."""

    def init_boxed(self, rngs, *args, **kwargs):
        """init with the logical-axis metadata (nn.Partitioned) that training shards by."""
        return nn.Module.init(self, rngs, *args, **kwargs)

    def init(self, rngs, *args, **kwargs):
        """Plain arrays named as in transformers."""
        return nn.meta.unbox(self.init_boxed(rngs, *args, **kwargs))

    def dropout(self, x, deterministic: bool, rate=None):
        """Dropout at `rate`, or at the heads' classifier_dropout (hidden_dropout_prob where the config sets none)."""
        cfg = self.config
        if rate is None:
            rate = cfg.hidden_dropout_prob if cfg.classifier_dropout is None else cfg.classifier_dropout
        return self.dropout_layer(rate)(x, deterministic=deterministic)


class ElectraEmbeddings(BertEmbeddings):
    """BERT's embeddings (word + token type + absolute position -> LayerNorm -> dropout), every table
    ``embedding_size`` wide: input_ids [B, L] -> [B, L, E]. The LayerNorm takes its width from its input."""

    def embed(self, num: int, features: int, *args, **kwargs):
        return super().embed(num, self.config.embedding_size, *args, **kwargs)


class ElectraModel(ElectraModule):
    """The encoder: input_ids [B, L] (token_type_ids, attention_mask, position_ids [B, L], head_mask [N] or
    [num_layers, N] optional) -> last_hidden_state [B, L, H]; hidden_states[0] is the projected embeddings,
    as transformers' encoder receives them.

    segment_ids [B, L] (packed rows, jaxbert.model.segments): attention within each document and positions
    restarting at each document's start (unless position_ids are given).
    first_token_only: the last layer computes the first token alone (a head that reads nothing else)."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None, first_token_only: bool = False):
        cfg = self.config
        B, L = input_ids.shape
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        mask = padding_mask(attention_mask, B, L)  # [B, 1, 1, L]
        if segment_ids is not None:
            mask = mask & segment_mask(segment_ids)[:, None]  # [B, 1, L, L]: within each document
            if position_ids is None:
                position_ids = segment_positions(segment_ids)
        if head_mask is not None:
            head_mask = jnp.asarray(head_mask)
            if head_mask.ndim == 1:  # the same mask for every layer
                head_mask = jnp.broadcast_to(head_mask, (cfg.num_hidden_layers, cfg.num_attention_heads))
        x = ElectraEmbeddings(cfg, self.options, name="embeddings")(input_ids, token_type_ids, position_ids,
                                                                    deterministic)
        if cfg.projects_embeddings:
            x = self.dense(cfg.hidden_size, (None, "embed"), "embeddings_project")(x)
        last, states, (attn, _) = BertEncoder(cfg, self.options, name="encoder")(
            x, mask, head_mask, None, None, deterministic, output_hidden_states, output_attentions,
            first_token_only)
        return ModelOutput(last_hidden_state=last, hidden_states=(x,) + states if output_hidden_states else None,
                           attentions=attn)
