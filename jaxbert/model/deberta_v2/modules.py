"""DeBERTa-v2's encoder (DeBERTa-v2 and -v3) in flax.linen under transformers' parameter names.

Post-norm layers as BERT's, whose self-attention is disentangled (jaxbert.model.deberta_v2.attention); the
relative-embedding table ``encoder.rel_embeddings`` [2 span, H] (layer-normed by ``encoder.LayerNorm`` where
norm_rel_ebd says "layer_norm") is shared by every layer. Embeddings: word_embeddings, position_embeddings only
with position_biased_input (DeBERTa-v3 has none), token_type_embeddings only with type_vocab_size > 0,
``embed_proj`` where embedding_size differs from hidden_size, LayerNorm, then padding zeroed. v2 configs with
conv_kernel_size > 0 add ``encoder.conv`` after the first layer: LayerNorm(layer 1's output + act(conv1d(the
embeddings))), padding zeroed.

Param tree (base model; the head classes hold it under ``deberta``):
  embeddings/{word_embeddings, position_embeddings?, token_type_embeddings?, embed_proj?, LayerNorm},
  encoder/{layer/{0, 1, ...}/{attention/{self/{query_proj, key_proj, value_proj, pos_key_proj?, pos_query_proj?},
  output/{dense, LayerNorm}}, intermediate/dense, output/{dense, LayerNorm}}, rel_embeddings?, LayerNorm?,
  conv?/{conv, LayerNorm}}.
With scan_layers, ``encoder/layer`` holds the layers' leaves with a leading axis of L (as BERT's).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxbert.model.activations import ACT_FNS
from jaxbert.model.base import ModelOutput
from jaxbert.model.deberta_v2.attention import DisentangledSelfAttention
from jaxbert.model.deberta_v2.base import DebertaV2Module
from jaxbert.model.deberta_v2.family import SCAN_CONV
from jaxbert.model.layers.embed import padding_row_frozen
from jaxbert.model.layers.stack import carry_form, remat_layer, scan_layers
from jaxbert.model.options import LAYER_INPUT, constrain_batch


class _PostNorm(DebertaV2Module):
    """dense -> dropout -> LayerNorm(x + residual) (transformers' DebertaV2SelfOutput and DebertaV2Output)."""

    axes: tuple = ("heads", "embed")

    @nn.compact
    def __call__(self, x, residual, deterministic=True):
        x = self.dense(self.config.hidden_size, self.axes, "dense")(x)
        x = self.dropout_layer(self.config.hidden_dropout_prob)(x, deterministic=deterministic)
        return self.layer_norm()(x + residual)


class _Attention(DebertaV2Module):
    """self (disentangled) -> output (dense, dropout, LayerNorm with the layer's input)."""

    @nn.compact
    def __call__(self, x, mask, rel_embeddings, deterministic, output_attentions):
        context, probs = DisentangledSelfAttention(self.config, self.options, name="self")(
            x, mask, rel_embeddings, deterministic, output_attentions)
        return _PostNorm(self.config, self.options, name="output")(context, x, deterministic), probs


class _Intermediate(DebertaV2Module):
    @nn.compact
    def __call__(self, x):
        cfg = self.config
        return ACT_FNS[cfg.hidden_act](self.dense(cfg.intermediate_size, ("embed", "mlp"), "dense")(x))


class DebertaV2Layer(DebertaV2Module):
    """attention -> intermediate -> output. Returns (hidden [B, T, H], probabilities [B, N, T, T] or None)."""

    @nn.compact
    def __call__(self, x, mask, rel_embeddings, deterministic=True, output_attentions=False):
        cfg = self.config
        x = checkpoint_name(x, LAYER_INPUT)
        h, probs = _Attention(cfg, self.options, name="attention")(x, mask, rel_embeddings, deterministic,
                                                                    output_attentions)
        inner = _Intermediate(cfg, self.options, name="intermediate")(h)
        out = _PostNorm(cfg, self.options, axes=("mlp", "embed"), name="output")(inner, h, deterministic)
        return constrain_batch(out), probs


def _remat(cls, options, in_scan: bool):
    """cls under options.remat_policy; deterministic and output_attentions (arguments 4 and 5 counting self)
    stay static."""
    return remat_layer(cls, options, in_scan, static_argnums=(4, 5))


class _Layers(DebertaV2Module):
    """layer/0, layer/1, ... in order. Returns (per-layer outputs, per-layer probabilities); the conv (where the
    config has one) is applied to layer 0's output by the encoder, between layers: see DebertaV2Encoder."""

    @nn.compact
    def __call__(self, x, mask, rel_embeddings, deterministic, output_attentions, after_first):
        layer_cls = _remat(DebertaV2Layer, self.options, in_scan=False)
        states, probs = [], []
        for i in range(self.config.num_hidden_layers):
            x, p = layer_cls(self.config, self.options, name=str(i))(x, mask, rel_embeddings, deterministic,
                                                                     output_attentions)
            if i == 0:
                x = after_first(x)
            states.append(x)
            probs.append(p)
        return tuple(states), tuple(probs)


class ConvLayer(DebertaV2Module):
    """transformers' ConvLayer: LayerNorm(residual + act(conv1d(x) with padding zeroed)), padding zeroed.
    conv: kernel [conv_kernel_size, H / conv_groups, H] (torch's Conv1d weight [H, H / groups, K] reversed),
    padding (K - 1) // 2 on each side, conv_groups groups."""

    @nn.compact
    def __call__(self, x, residual, real, deterministic=True):
        cfg, opts = self.config, self.options
        K = cfg.conv_kernel_size
        conv = nn.Conv(cfg.hidden_size, (K,), padding=[((K - 1) // 2, (K - 1) // 2)],
                       feature_group_count=cfg.conv_groups, dtype=opts.dtype, param_dtype=opts.param_dtype,
                       kernel_init=nn.with_logical_partitioning(nn.initializers.normal(cfg.initializer_range),
                                                                (None, None, "embed")),
                       bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)), name="conv")
        out = jnp.where(real[..., None], conv(x), 0)
        out = ACT_FNS[cfg.conv_act](self.dropout_layer(cfg.hidden_dropout_prob)(out, deterministic=deterministic))
        return self.layer_norm()(residual + out) * real[..., None].astype(out.dtype)


class DebertaV2Embeddings(DebertaV2Module):
    """word (+ position, with position_biased_input) (+ token type, with type_vocab_size > 0) -> embed_proj where
    embedding_size differs -> LayerNorm -> padding zeroed (attention_mask) -> dropout."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids, position_ids, real, deterministic=True):
        cfg = self.config
        E = cfg.embed_size
        words = self.embed(cfg.vocab_size, E, ("vocab", "embed"), "word_embeddings", pad_row=cfg.pad_token_id)(input_ids)
        x = padding_row_frozen(words, input_ids, cfg.pad_token_id)
        if cfg.position_biased_input:
            if position_ids is None:
                position_ids = jnp.arange(input_ids.shape[1])[None]
            x = x + self.embed(cfg.max_position_embeddings, E, (None, "embed"), "position_embeddings",
                               small=True)(position_ids)
        if cfg.type_vocab_size > 0:
            if token_type_ids is None:
                token_type_ids = jnp.zeros_like(input_ids)
            x = x + self.embed(cfg.type_vocab_size, E, (None, "embed"), "token_type_embeddings",
                               small=True)(token_type_ids)
        if E != cfg.hidden_size:
            x = self.dense(cfg.hidden_size, ("embed", None), "embed_proj", use_bias=False)(x)
        x = self.layer_norm()(x) * real[..., None].astype(self.options.dtype)
        return self.dropout_layer(cfg.hidden_dropout_prob)(x, deterministic=deterministic)


class DebertaV2Encoder(DebertaV2Module):
    """The layers, the shared relative embeddings and the conv. Returns (per-layer outputs, probabilities)."""

    @nn.compact
    def __call__(self, x, attention_mask, real, deterministic, output_attentions):
        cfg, opts = self.config, self.options
        rel = None
        if cfg.relative_attention:
            rel = self.embed(2 * cfg.att_span, cfg.hidden_size, (None, "embed"), "rel_embeddings").embedding
            rel = nn.meta.unbox(rel).astype(opts.dtype)
            if cfg.norm_rel:
                rel = self.layer_norm()(rel)
        # a padded key is attended by no query (transformers masks padded queries too: their rows are not read)
        mask = attention_mask.astype(bool)[:, None, None, :]
        conv = ConvLayer(cfg, opts, name="conv") if cfg.conv_kernel_size > 0 else None
        after_first = (lambda h: conv(x, h, real, deterministic)) if conv is not None else (lambda h: h)
        if opts.scan_layers:
            L = cfg.num_hidden_layers
            if conv is not None:  # build() refuses this first; kept for a module made by hand
                raise ValueError(SCAN_CONV)
            scanned = scan_layers(_remat(carry_form(DebertaV2Layer), opts, in_scan=True), L,
                                  in_axes=(nn.broadcast,) * 4)
            _, (per_layer, p) = scanned(cfg, opts, name="layer")(x, mask, rel, deterministic, output_attentions)
            return tuple(per_layer[i] for i in range(L)), tuple(None if p is None else p[i] for i in range(L))
        return _Layers(cfg, opts, name="layer")(x, mask, rel, deterministic, output_attentions, after_first)


class DebertaV2Model(DebertaV2Module):
    """The encoder. input_ids [B, T]; token_type_ids [B, T] (read only with type_vocab_size > 0); attention_mask
    [B, T] (1 = real token); position_ids [B, T] (default 0..T-1; read only with position_biased_input).

    Returns ModelOutput: last_hidden_state = the last layer's output [B, T, H]; hidden_states (with
    output_hidden_states) the embeddings and every layer's output (layer 1's after the conv); attentions
    [B, N, T, T] per layer. segment_ids (packed documents) are refused: the conv and the relative positions do
    not restart at a document's start."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None):
        cfg = self.config
        if head_mask is not None:
            raise ValueError("head_mask: DeBERTa-v2 has no head mask (jaxbert's DebertaV2Model takes none)")
        if segment_ids is not None:
            raise ValueError("segment_ids: DeBERTa-v2 takes no packed documents (data.packing: none)")
        if attention_mask is None:
            attention_mask = jnp.ones(input_ids.shape, jnp.int32)
        real = attention_mask.astype(bool)
        x = DebertaV2Embeddings(cfg, self.options, name="embeddings")(input_ids, token_type_ids, position_ids, real,
                                                                      deterministic)
        x = constrain_batch(x)
        states, probs = DebertaV2Encoder(cfg, self.options, name="encoder")(x, attention_mask, real, deterministic,
                                                                            output_attentions)
        return ModelOutput(last_hidden_state=states[-1],
                           hidden_states=(x,) + states if output_hidden_states else None,
                           attentions=probs if output_attentions else None)
