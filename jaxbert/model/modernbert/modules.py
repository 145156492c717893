"""ModernBERT's encoder in flax.linen under transformers' parameter names.

Pre-norm layers: x + attn(attn_norm(x)), then x + mlp(mlp_norm(x)); layer 0 has no attn_norm
(its input is the embeddings' norm already). Embeddings: tok_embeddings -> norm -> dropout,
no position or token-type table: positions enter through RoPE in every attention.

Param tree (base model; the head classes hold it under ``model``):
  embeddings/{tok_embeddings, norm}, layers/{0, 1, ...}/{attn_norm, attn/{Wqkv, Wo}, mlp_norm,
  mlp/{Wi, Wo}}, final_norm.
With scan_layers, layer 0 stays layers/0 (it lacks attn_norm) and layers 1..L-1 are one
layers/scan whose leaves carry a leading axis of L - 1; each scanned layer takes its kind
(full or sliding) as data, unless they are all of one kind.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxbert.model.base import ModelOutput
from jaxbert.model.layers import attention
from jaxbert.model.layers.feedforward import GatedFeedForward, dropout_key, in_token_blocks, takes_blocks
from jaxbert.model.layers.embed import padding_row_frozen
from jaxbert.model.layers.rotary import rope_tables, rotary_positions
from jaxbert.model.modernbert.attention import ModernBertAttention, takes_fused
from jaxbert.model.modernbert.base import ModernBertModule
from jaxbert.model.modernbert.config import FULL
from jaxbert.model.layers.stack import kind_period, remat_layer, scan_layers
from jaxbert.model.options import LAYER_INPUT, constrain_batch

SCAN = "scan"  # the name of the scanned stack of layers 1..L-1 under layers/


class ModernBertEmbeddings(ModernBertModule):
    """input_ids [B, T] -> norm(tok_embeddings) [B, T, H], dropped out."""

    @nn.compact
    def __call__(self, input_ids, deterministic=True):
        cfg = self.config
        words = self.embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"), "tok_embeddings")(input_ids)
        words = padding_row_frozen(words, input_ids, cfg.pad_token_id)
        x = constrain_batch(self.norm("norm")(words))
        return self.dropout_layer(cfg.embedding_dropout)(x, deterministic=deterministic)


def modernbert_mlp(module: ModernBertModule, name: str = "mlp") -> GatedFeedForward:
    """GeGLU: Wi [H -> 2I] splits into input | gate; Wo(dropout(act(input) * gate)) [.., H]."""
    cfg = module.config
    return GatedFeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_activation, ("Wi", "Wo"),
                            cfg.mlp_bias, cfg.mlp_dropout, module.options, module.trunc_normal(module.std_in),
                            module.trunc_normal(module.std_out), name=name)


class ModernBertEncoderLayer(ModernBertModule):
    """One pre-norm layer.

    Attributes:
      first: layer 0, which has no attn_norm.
      kind: FULL or SLIDING; None in the scanned stack, where ``is_global`` comes as data.
    Args:
      hidden_states: [B, T, H]; mask: bool [B, 1, 1, T] (packed rows: [B, 1, T, T]), or segment ids [B, T]
      on the fused attention paths (modernbert.attention.takes_fused); ropes: {True: (cos, sin) of the global
      theta, False: of the local one}, each [B or 1, T, D].
    Returns: (hidden_states [B, T, H], attention probabilities or None).
    """

    first: bool = False
    kind: str | None = None

    @nn.compact
    def __call__(self, hidden_states, mask, ropes, is_global=None, deterministic=True, output_attentions=False):
        hidden_states = checkpoint_name(hidden_states, LAYER_INPUT)
        if self.kind is not None:
            is_global = self.kind == FULL
            rope = ropes[is_global]
        else:  # traced: pick the table by data
            rope = tuple(jnp.where(is_global, g, l) for g, l in zip(ropes[True], ropes[False]))
        x = hidden_states if self.first else self.norm("attn_norm")(hidden_states)
        attn, probs = ModernBertAttention(self.config, self.options, name="attn")(
            x, mask, rope, is_global, deterministic, output_attentions)
        h = hidden_states + attn
        mlp_norm, mlp = self.norm("mlp_norm"), modernbert_mlp(self)
        blocks = takes_blocks(self.options, h.shape[1])
        key = dropout_key(self, self.config.mlp_dropout, deterministic, blocks, "mlp")
        if blocks:
            whole = (*h.shape[:2], self.config.intermediate_size)

            def block(layer, hc, key, t0):
                return mlp(mlp_norm(hc), deterministic, dropout_key=key, whole=whole, start=(0, t0, 0))

            h = h + in_token_blocks(self, block, h, key)
        else:
            h = h + mlp(mlp_norm(h), deterministic, dropout_key=key)
        return constrain_batch(h), probs


class _ScanLayer(ModernBertEncoderLayer):
    """A layer in nn.scan's (carry, x) -> (carry, y) form; x is the layer's is_global flag (read
    when ``kind`` is None, i.e. when the scanned layers are of both kinds)."""

    def __call__(self, carry, is_global, mask, ropes, deterministic=True, output_attentions=False):
        hidden, probs = super().__call__(carry, mask, ropes, is_global, deterministic, output_attentions)
        return hidden, (hidden, probs)


def _remat(cls, options, in_scan: bool):
    """A ModernBERT layer under the remat policy; deterministic and output_attentions (arguments 5 and 6
    counting self) stay static."""
    return remat_layer(cls, options, in_scan, static_argnums=(5, 6))


class _ScanGroup(ModernBertModule):
    """One period of a scanned stack whose kinds repeat (ModernBERT's local, local, global): its layers in
    sequence, each of a static kind, so no layer chooses its attention by data (a lax.cond there copies the
    kernel's operands in and out of its branches on a TPU). Sublayers are named 0..p-1."""

    kinds: tuple = ()

    @nn.compact
    def __call__(self, carry, unused, mask, ropes, deterministic=True, output_attentions=False):
        layer_cls = _remat(ModernBertEncoderLayer, self.options, in_scan=True)
        states = []
        for j, kind in enumerate(self.kinds):
            carry, _ = layer_cls(self.config, self.options, kind=kind, name=str(j))(
                carry, mask, ropes, None, deterministic, output_attentions)
            states.append(carry)
        return carry, jnp.stack(states)


class _Layers(ModernBertModule):
    """The layer stack under ``layers``: 0, 1, ..., or 0 and the scanned rest.

    Returns (last hidden state [B, T, H], per-layer outputs, per-layer probabilities or None).
    """

    @nn.compact
    def __call__(self, x, mask, ropes, deterministic, output_attentions):
        cfg, opts = self.config, self.options
        kinds = cfg.layer_kinds
        layer_cls = _remat(ModernBertEncoderLayer, opts, in_scan=False)
        states, probs = [], []
        n_unscanned = 1 if opts.scan_layers else cfg.num_hidden_layers
        for i in range(n_unscanned):
            x, p = layer_cls(cfg, opts, first=i == 0, kind=kinds[i], name=str(i))(
                x, mask, ropes, None, deterministic, output_attentions)
            states.append(x)
            probs.append(p)
        rest = cfg.num_hidden_layers - n_unscanned
        if rest:
            period = kind_period(kinds[1:])
            if (period and not self.is_initializing()
                    and takes_fused(cfg, opts, deterministic, output_attentions)):
                # the same params (layers/scan, leaves [L - 1, ..]) run as (L - 1) / p groups of p layers of
                # static kinds; init keeps the per-layer scan, so a model's initial params do not change
                x, per_layer = self._grouped(x, mask, ropes, deterministic, kinds[1:1 + period], rest // period)
                states += [per_layer[i] for i in range(rest)]
                probs += [None] * rest
                return x, tuple(states), tuple(probs)
            scanned = scan_layers(_remat(_ScanLayer, opts, in_scan=True), rest, (0,) + (nn.broadcast,) * 4)
            is_global = jnp.array([k == FULL for k in kinds[1:]])
            # When the scanned layers are all of one kind (every layer global, say), the kind stays static.
            same = kinds[1] if len(set(kinds[1:])) == 1 else None
            x, (per_layer, p) = scanned(cfg, opts, kind=same, name=SCAN)(x, is_global, mask, ropes, deterministic,
                                                                         output_attentions)
            states += [per_layer[i] for i in range(rest)]
            probs += [None if p is None else p[i] for i in range(rest)]
        return x, tuple(states), tuple(probs)

    def _grouped(self, x, mask, ropes, deterministic, kinds, n):
        """x through the scanned stack as n groups of len(kinds) layers ([L - 1, ..] params read as [n, p, ..]);
        returns the last hidden state and the per-layer outputs [L - 1, B, T, H]."""
        p = len(kinds)

        def to_groups(variables):  # {"params": leaves [n p, ..]} -> {"params": {"0": leaves [n, ..], ...}}
            return {col: {str(j): jax.tree.map(lambda a: a.reshape((n, p) + a.shape[1:])[:, j], tree)
                          for j in range(p)} for col, tree in variables.items()}

        scanned = scan_layers(_ScanGroup, n, (0,) + (nn.broadcast,) * 4)
        grouped = nn.map_variables(scanned, "params", trans_in_fn=to_groups)
        x, per_group = grouped(self.config, self.options, kinds=tuple(kinds), name=SCAN)(
            x, jnp.zeros((n,), jnp.int32), mask, ropes, deterministic, False)
        return x, per_group.reshape((n * p,) + per_group.shape[2:])


class ModernBertModel(ModernBertModule):
    """The encoder. input_ids [B, T]; attention_mask [B, T] (1 = real token); position_ids [B, T]
    (default 0..T-1). token_type_ids is accepted so BERT's callers can pass it; ModernBERT has
    no token types and does not read it.

    segment_ids [B, T] (packed rows: 0 = padding, 1..k = the documents of a row; see
    jaxbert.model.segments): attention stays within each document on global and sliding layers
    alike, and the rotary positions (of both thetas) restart at 0 at each document's start (unless
    position_ids are given); None computes as an unpacked row.

    Returns ModelOutput: last_hidden_state = final_norm(last layer) [B, T, H]; hidden_states
    (with output_hidden_states) = the embeddings and every layer's output before final_norm,
    as transformers' eager / sdpa paths return them; attentions [B, N, T, T] per layer.
    Padded positions are computed as those paths compute them (they attend to the real keys
    in reach); transformers' flash-attention path unpads and returns zeros there instead.
    """

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        cfg = self.config
        if head_mask is not None:
            raise ValueError("head_mask: ModernBERT has no head mask (transformers' ModernBertModel takes none)")
        B, T = input_ids.shape
        fused_path = takes_fused(cfg, self.options, deterministic, output_attentions)
        mask = attention.layer_mask(fused_path, attention_mask, segment_ids, (B, T))
        positions = rotary_positions(position_ids, segment_ids, T)
        D, dtype = cfg.head_dim, self.options.dtype
        ropes = {True: rope_tables(positions, D, cfg.global_theta, dtype),
                 False: rope_tables(positions, D, cfg.local_theta, dtype)}
        x = ModernBertEmbeddings(cfg, self.options, name="embeddings")(input_ids, deterministic)
        last, states, probs = _Layers(cfg, self.options, name="layers")(x, mask, ropes, deterministic,
                                                                        output_attentions)
        return ModelOutput(last_hidden_state=self.norm("final_norm")(last),
                           hidden_states=(x,) + states if output_hidden_states else None,
                           attentions=probs if output_attentions else None)
