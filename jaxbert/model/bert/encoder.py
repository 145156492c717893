"""BERT building blocks in flax.linen, named exactly as transformers names them.

Post-LN transformer: embeddings -> LayerNorm -> dropout, then per layer
attention -> dense -> dropout -> add & LayerNorm -> dense(I) -> act ->
dense(H) -> dropout -> add & LayerNorm.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxbert.errors import InputError
from jaxbert.model.bert.attention import BertSelfAttention
from jaxbert.model.dropout import apply_hash_dropout
from jaxbert.model.activations import ACT_FNS
from jaxbert.model.base import Array, BertModule
from jaxbert.model.layers.embed import padding_row_frozen
from jaxbert.model.layers.feedforward import dropout_key, in_token_blocks, takes_blocks
from jaxbert.model.layers.stack import remat_layer, scan_layers
from jaxbert.model.options import LAYER_INPUT, constrain_batch


def check_length(length: int, config) -> None:
    """Refuse a sequence longer than the position table.

    Shapes are static, so this runs once per trace. Past the table, an embedding
    lookup would read out of bounds (NaN or garbage logits, silently).
    """
    limit = config.position_limit()
    if length > limit:
        offset = config.family.position_offset(config)
        table = (f"{limit} positions (max_position_embeddings {config.max_position_embeddings} less "
                 f"{offset} before the first)" if offset else
                 f"max_position_embeddings {config.max_position_embeddings}")
        raise InputError(f"input length {length} exceeds the model's {table}; truncate the input")


class BertEmbeddings(BertModule):
    """input_ids, token_type_ids, position_ids [B, L] -> embeddings [B, L, H]."""

    def setup(self):
        cfg = self.config
        self.word_embeddings = self.embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                          "word_embeddings", pad_row=cfg.pad_token_id)
        # transformers creates the absolute table for every position_embedding_type;
        # RoBERTa's keeps a zero row at padding_idx, which padding positions point to.
        self.position_embeddings = self.embed(cfg.max_position_embeddings, cfg.hidden_size,
                                              (None, "embed"), "position_embeddings",
                                              pad_row=cfg.pad_token_id if cfg.family.zero_position_pad else None,
                                              small=True)
        self.token_type_embeddings = self.embed(cfg.type_vocab_size, cfg.hidden_size,
                                                (None, "embed"), "token_type_embeddings", small=True)
        self.LayerNorm = self.layer_norm()
        self.dropout = self.dropout_layer(cfg.hidden_dropout_prob)
        if self.options.decode:  # how many positions the cache holds already
            self.position_index = self.variable("cache", "position_index", lambda: jnp.array(0, jnp.int32))

    def __call__(self, input_ids, token_type_ids, position_ids=None, deterministic=True):
        check_length(input_ids.shape[-1], self.config)
        if position_ids is None and self.config.family.position_ids is not None:
            position_ids = self.config.family.position_ids(input_ids, self.config)
        elif position_ids is None:
            position_ids = self._default_positions(input_ids.shape)
        words = padding_row_frozen(self.word_embeddings(input_ids), input_ids, self.config.pad_token_id)
        x = words + self.token_type_embeddings(token_type_ids)
        if self.config.position_embedding_type == "absolute":
            x = x + self.position_embeddings(position_ids)
        else:
            # Unused, but transformers' checkpoints hold it: create it so the trees match.
            _ = self.position_embeddings.embedding
        x = constrain_batch(self.LayerNorm(x))
        return self.dropout(x, deterministic=deterministic)

    def _default_positions(self, shape):
        """0..L-1, or, when decoding, continuing from the tokens already cached."""
        B, L = shape
        positions = jnp.arange(L)
        if self.options.decode and not self.is_initializing():
            positions = positions + self.position_index.value
            self.position_index.value = self.position_index.value + L
        return jnp.broadcast_to(positions, (B, L))


class BertSelfOutput(BertModule):
    """dense -> dropout -> residual add -> LayerNorm."""

    axes = ("heads", "embed")  # logical axes of the dense kernel (a class constant, not a field)

    @nn.compact
    def __call__(self, hidden_states, input_tensor, deterministic=True, dropout_key=None, whole=None, start=None):
        """dropout_key: apply HashDropout's mask with this key, as the block at `start` of an array shaped
        `whole` (default: all of it; BertLayer passes one for its feed-forward block, whole or in blocks of
        tokens); None: this module's own dropout layer."""
        x = self.dense(self.config.hidden_size, self.axes, "dense")(hidden_states)
        rate = self.config.hidden_dropout_prob
        if dropout_key is None:
            x = self.dropout_layer(rate)(x, deterministic=deterministic)
        elif not deterministic and rate > 0:
            x = apply_hash_dropout(x, dropout_key, rate, whole=whole, start=start)
        return self.layer_norm()(x + input_tensor)


class BertAttention(BertModule):
    """Self- (or cross-) attention followed by BertSelfOutput."""

    is_cross: bool = False

    @nn.compact
    def __call__(self, hidden_states, mask, kv=None, layer_head_mask=None,
                 deterministic=True, output_attentions=False):
        context, probs = BertSelfAttention(self.config, self.options, is_cross=self.is_cross, name="self")(
            hidden_states, mask, kv, layer_head_mask, deterministic, output_attentions)
        out = BertSelfOutput(self.config, self.options, name="output")(context, hidden_states, deterministic)
        return out, probs


class BertIntermediate(BertModule):
    @nn.compact
    def __call__(self, hidden_states):
        x = self.dense(self.config.intermediate_size, ("embed", "mlp"), "dense")(hidden_states)
        return ACT_FNS[self.config.hidden_act](x)


class BertOutput(BertSelfOutput):
    """The feed-forward block's dense(I -> H) -> dropout -> residual add -> LayerNorm."""

    axes = ("mlp", "embed")


class BertLayer(BertModule):
    """One transformer layer.

    Args:
      hidden_states: [B, T, H].
      layer_head_mask: [N] or None.
      mask: bool [B, 1, T, T] self-attention mask.
      encoder_hidden_states: [B, S, H] or None; needs config.add_cross_attention.
      encoder_mask: bool [B, 1, 1, S].
    Returns:
      (hidden_states [B, T, H], (self-attention probs, cross-attention probs)).
    """

    def setup(self):
        self.attention = BertAttention(self.config, self.options)
        if self.config.add_cross_attention:
            self.crossattention = BertAttention(self.config, self.options, is_cross=True)
        self.intermediate = BertIntermediate(self.config, self.options)
        self.output = BertOutput(self.config, self.options)

    def __call__(self, hidden_states, layer_head_mask, mask, encoder_hidden_states=None,
                 encoder_mask=None, deterministic=True, output_attentions=False, self_kv=None):
        # Named so a remat policy can keep it elsewhere ("offload"); every use below reads the named value,
        # so the backward pass needs no other per-layer activation.
        hidden_states = checkpoint_name(hidden_states, LAYER_INPUT)
        x, probs = self.attention(hidden_states, mask, self_kv, layer_head_mask,
                                  deterministic, output_attentions)
        cross_probs = None
        if encoder_hidden_states is not None and not self.config.add_cross_attention:
            raise ValueError("encoder_hidden_states given but config.add_cross_attention is False")
        if encoder_hidden_states is None and self.config.add_cross_attention and self.is_initializing():
            # init without encoder states must still create the crossattention params.
            encoder_hidden_states = x
        # Under decode, cross-attention reads the encoder keys/values from its cache.
        if encoder_hidden_states is not None or (self.options.decode and self.config.add_cross_attention):
            if encoder_mask is None:
                encoder_mask = jnp.ones((1, 1, 1, 1), bool)
            x, cross_probs = self.crossattention(x, encoder_mask, encoder_hidden_states,
                                                 layer_head_mask, deterministic, output_attentions)
        blocks = takes_blocks(self.options, x.shape[1])
        key = dropout_key(self, self.config.hidden_dropout_prob, deterministic, blocks, "hidden")
        if blocks:
            whole = x.shape

            def block(layer, xc, key, t0):
                return layer.output(layer.intermediate(xc), xc, deterministic, dropout_key=key, whole=whole,
                                    start=(0, t0, 0))

            y = in_token_blocks(self, block, x, key)
        else:
            y = self.output(self.intermediate(x), x, deterministic, dropout_key=key)
        return constrain_batch(y), (probs, cross_probs)


class _ScanBertLayer(BertLayer):
    """BertLayer in nn.scan's (carry, x) -> (carry, y) form; y is what the caller
    may want per layer: the hidden state and attention probabilities."""

    def __call__(self, carry, layer_head_mask, *args):
        hidden, probs = super().__call__(carry, layer_head_mask, *args)
        return hidden, (hidden, probs)


class BertEncoder(BertModule):
    """The layer stack; params under encoder/layer/{0..L-1}, or encoder/layer with
    a leading layer axis when scan_layers is set.

    Returns (last hidden state, per-layer hidden states or None, (self probs, cross probs)).
    """

    def _compute_dtype_dense(self, variables):
        dtype, param_dtype = self.options.dtype, self.options.param_dtype
        if dtype is None or jnp.dtype(dtype) == jnp.dtype(param_dtype or jnp.float32):
            return variables
        return {c: _cast_dense_params(v, dtype) for c, v in variables.items()}

    @nn.compact
    def __call__(self, hidden_states, mask, head_mask=None, encoder_hidden_states=None,
                 encoder_mask=None, deterministic=True, output_hidden_states=False,
                 output_attentions=False, first_token_only=False):
        """first_token_only: the last layer computes its output at the first token alone (keys and
        values over every token); the caller reads nothing else of it. Ignored where hidden states or
        attentions are returned, under decode and with scan_layers."""
        cfg = self.config
        L = cfg.num_hidden_layers
        # deterministic and output_attentions (args 6, 7 counting self) stay static.
        layer_cls = remat_layer(_ScanBertLayer if self.options.scan_layers else BertLayer, self.options,
                                in_scan=self.options.scan_layers, static_argnums=(6, 7))
        if self.options.scan_layers:
            scanned = scan_layers(layer_cls, L, (0 if head_mask is not None else nn.broadcast,) + (nn.broadcast,) * 5,
                                  variable_axes={"params": 0, "cache": 0})
            if not self.is_initializing():
                # The Dense params, stacked [L, ...], cast to the compute dtype before the loop rather than
                # slice by slice inside it: each Dense casts them anyway (same values), but the loop's
                # backward pass then stacks their gradients in that dtype ([L, ...] bf16, exactly the
                # per-layer gradients the matmuls produce) and widens them once outside, where XLA fuses
                # the widening into the norm and the optimizer update, instead of holding a stacked
                # float32 copy of every layer's gradients (324 MiB for bert-base: docs/tpu.md).
                scanned = nn.map_variables(scanned, "params", trans_in_fn=self._compute_dtype_dense)
            hidden_states, (per_layer, (probs, cross)) = scanned(self.config, self.options, name="layer")(
                hidden_states, head_mask, mask, encoder_hidden_states, encoder_mask,
                deterministic, output_attentions)
            layer_states = tuple(per_layer[i] for i in range(L)) if output_hidden_states else None
            unstack = (lambda a: None if a is None else tuple(a[i] for i in range(L)))
            return hidden_states, layer_states, (unstack(probs), unstack(cross))

        layer_states, all_probs, all_cross = [], [], []
        stack = _LayerCollection(self.config, self.options, name="layer")
        first_only = (first_token_only and not (output_hidden_states or output_attentions or self.options.decode)
                      and not self.is_initializing())
        for i in range(L):
            queries, layer_mask, kv = hidden_states, mask, None
            if first_only and i == L - 1:
                # the first token's query against every token's keys and values: its row of the mask
                queries, layer_mask, kv = hidden_states[:, :1], mask[:, :, :1], hidden_states
            hidden_states, (probs, cross) = stack.apply_layer(
                layer_cls, i, queries, None if head_mask is None else head_mask[i],
                layer_mask, encoder_hidden_states, encoder_mask, deterministic, output_attentions, kv)
            layer_states.append(hidden_states)
            all_probs.append(probs)
            all_cross.append(cross)
        attn = tuple(all_probs) if output_attentions else None
        cross = tuple(all_cross) if output_attentions and encoder_hidden_states is not None else None
        return hidden_states, (tuple(layer_states) if output_hidden_states else None), (attn, cross)


def _cast_dense_params(tree, dtype):
    """A params tree with every Dense's kernel and bias (a dict holding a "kernel") cast to dtype."""
    if not isinstance(tree, dict) and not hasattr(tree, "items"):
        return tree
    if "kernel" in tree:
        return {k: (v.astype(dtype) if k in ("kernel", "bias") else v) for k, v in tree.items()}
    return {k: _cast_dense_params(v, dtype) for k, v in tree.items()}


class _LayerCollection(BertModule):
    """Holds layers named '0', '1', ... so the tree reads encoder/layer/0, as in transformers."""

    @nn.compact
    def apply_layer(self, layer_cls, i, *args):
        return layer_cls(self.config, self.options, name=str(i))(*args)


class BertPooler(BertModule):
    """tanh(dense(first token)): [B, L, H] -> [B, H]."""

    @nn.compact
    def __call__(self, hidden_states):
        return jnp.tanh(self.dense(self.config.hidden_size, ("embed", None), "dense")(hidden_states[:, 0]))


class BertPredictionHeadTransform(BertModule):
    @nn.compact
    def __call__(self, hidden_states):
        x = self.dense(self.config.hidden_size, ("embed", None), "dense")(hidden_states)
        return self.layer_norm()(ACT_FNS[self.config.hidden_act](x))


class BertLMPredictionHead(BertModule):
    """transform -> decoder -> + bias. The decoder is the word-embedding matrix
    (tied) unless config.tie_word_embeddings is False; the bias is always its own.

    Args:
      hidden_states: [B, M, H] (all positions, or only the gathered masked ones).
      word_embeddings: [V, H] table for the tied decoder.
    Returns: logits [B, M, V].
    """

    @nn.compact
    def __call__(self, hidden_states, word_embeddings: Optional[Array] = None):
        x = BertPredictionHeadTransform(self.config, self.options, name="transform")(hidden_states)
        return self.vocab_logits(x, word_embeddings)
