"""EuroBERT's encoder in flax.linen under transformers' parameter names: a Llama-style bidirectional encoder.

Pre-norm layers: x + self_attn(input_layernorm(x)), then x + mlp(post_attention_layernorm(x)), RMSNorm
throughout; the attention is grouped-query (num_key_value_heads key/value heads, each serving
num_attention_heads / num_key_value_heads query heads) with RoPE of one theta on q and k; the MLP is
SwiGLU without biases (down_proj(act(gate_proj(x)) * up_proj(x))). Embeddings: embed_tokens alone
(no position or token-type table, no norm, no dropout); a final ``norm`` after the last layer.

Param tree (base model; the head classes hold it under ``model``):
  embed_tokens, layers/{0, 1, ...}/{input_layernorm, self_attn/{q_proj, k_proj, v_proj, o_proj},
  post_attention_layernorm, mlp/{gate_proj, up_proj, down_proj}}, norm.
With scan_layers the layers are one ``layers`` whose leaves carry a leading axis of L (as BERT's
encoder/layer): every EuroBERT layer is of one kind.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxbert.model import fused
from jaxbert.model.base import BertModule, ModelOutput
from jaxbert.model.layers import attention
from jaxbert.model.layers.feedforward import GatedFeedForward, in_token_blocks, takes_blocks
from jaxbert.model.layers.norms import rms_norm
from jaxbert.model.layers.embed import padding_row_frozen
from jaxbert.model.layers.rotary import apply_rope, rope_tables, rotary_positions
from jaxbert.model.layers.stack import carry_form, remat_layer, scan_layers
from jaxbert.model.options import LAYER_INPUT, constrain_batch


class EuroBertModule(BertModule):
    """config: a EuroBertConfig; options: ModelOptions. transformers' init: every Linear and the embeddings
    normal(initializer_range) (BertModule.dense, .embed), biases zero, RMSNorm weights one."""

    def init_boxed(self, rngs, *args, **kwargs):
        """init with the logical-axis metadata (nn.Partitioned) that training shards by."""
        return nn.Module.init(self, rngs, *args, **kwargs)

    def init(self, rngs, *args, **kwargs):
        """Plain arrays named as in transformers."""
        return nn.meta.unbox(self.init_boxed(rngs, *args, **kwargs))

    def norm(self, name: str):
        return rms_norm(self.config.rms_norm_eps, self.options, name)


class EuroBertAttention(EuroBertModule):
    """q_proj, k_proj, v_proj -> RoPE on q and k -> attention -> o_proj.

    Args:
      hidden_states: [B, T, H] (already input_layernorm-ed).
      mask: see jaxbert.model.layers.attention.layer_mask.
      rope: (cos, sin) [B or 1, T, head_dim].
    Returns:
      [B, T, H] and the attention probabilities [B, N, T, T] (or None).

    The paths are jaxbert.model.layers.attention's choice (path): einsum (scores multiplied by head_dim ** -0.5
    rounded to the compute dtype and the softmax in float32 at least, as transformers' eager path takes them;
    whole, or in options.attention_chunks blocks of queries), dot_product, or the fused blocked, splash and
    auto (blocked in float64), which never form the [B, N, T, T] scores; each key/value head serves
    num_attention_heads / num_key_value_heads query heads (layers.attention.share_kv).
    """

    @nn.compact
    def __call__(self, hidden_states, mask, rope, deterministic=True, output_attentions=False):
        cfg, opts = self.config, self.options
        B, T, H = hidden_states.shape
        N, K, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        project = lambda n, heads: self.dense(heads * D, ("embed", "heads"), n, cfg.attention_bias)(  # noqa: E731
            hidden_states).reshape(B, T, heads, D)
        q, k, v = project("q_proj", N), project("k_proj", K), project("v_proj", K)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        impl = attention.path(opts, attention.needs_probs(cfg.attention_dropout, deterministic, output_attentions))
        probs = None
        if impl in fused.FUSED_IMPLS:
            segments = mask if mask.dtype != jnp.bool_ else fused.key_segments(mask, T)
            context = fused.attend(q, *attention.share_kv(k, v, N), segments, D ** -0.5, None, impl)
        elif impl == "dot_product":
            context = attention.dot_product_attention(q, k, v, mask, scale=D ** -0.5)
        else:
            context, probs = attention.einsum_attention(
                self, q, k, v, mask, jnp.asarray(D ** -0.5, opts.dtype), rate=cfg.attention_dropout,
                deterministic=deterministic, output_probs=output_attentions)
        out = self.dense(H, ("heads", "embed"), "o_proj", cfg.attention_bias)(context.reshape(B, T, N * D))
        return out, probs


def eurobert_mlp(module: EuroBertModule, name: str = "mlp") -> GatedFeedForward:
    """SwiGLU: down_proj(act(gate_proj(x)) * up_proj(x)); biases only with mlp_bias; no dropout."""
    cfg = module.config
    init = nn.initializers.normal(cfg.initializer_range)
    return GatedFeedForward(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act,
                            ("gate_proj", "up_proj", "down_proj"), cfg.mlp_bias, 0.0, module.options, init, init,
                            name=name)


class EuroBertDecoderLayer(EuroBertModule):
    """One pre-norm layer (transformers' EuroBertDecoderLayer: decoder by name, bidirectional).
    Returns (hidden_states [B, T, H], attention probabilities or None)."""

    @nn.compact
    def __call__(self, hidden_states, mask, rope, deterministic=True, output_attentions=False):
        hidden_states = checkpoint_name(hidden_states, LAYER_INPUT)
        attn, probs = EuroBertAttention(self.config, self.options, name="self_attn")(
            self.norm("input_layernorm")(hidden_states), mask, rope, deterministic, output_attentions)
        h = hidden_states + attn
        norm, mlp = self.norm("post_attention_layernorm"), eurobert_mlp(self)
        if takes_blocks(self.options, h.shape[1]):  # ffn_chunks: blocks of tokens, each recomputed backward

            def block(layer, hc, key, t0):
                return mlp(norm(hc), deterministic)

            h = h + in_token_blocks(self, block, h, None)
        else:
            h = h + mlp(norm(h), deterministic)
        return constrain_batch(h), probs


def _remat(cls, options, in_scan: bool):
    """cls under options.remat_policy; deterministic and output_attentions (arguments 4 and 5 counting self)
    stay static."""
    return remat_layer(cls, options, in_scan, static_argnums=(4, 5))


class _Layers(EuroBertModule):
    """layers/0, layers/1, ... in order. Returns (last hidden state, per-layer outputs, per-layer probabilities)."""

    @nn.compact
    def __call__(self, x, mask, rope, deterministic, output_attentions):
        layer_cls = _remat(EuroBertDecoderLayer, self.options, in_scan=False)
        states, probs = [], []
        for i in range(self.config.num_hidden_layers):
            x, p = layer_cls(self.config, self.options, name=str(i))(x, mask, rope, deterministic, output_attentions)
            states.append(x)
            probs.append(p)
        return x, tuple(states), tuple(probs)


def _scanned_layers(module: EuroBertModule, x, mask, rope, deterministic, output_attentions):
    """The layers as one nn.scan named ``layers`` (leaves [L, ..]); the same returns as _Layers."""
    L = module.config.num_hidden_layers
    scanned = scan_layers(_remat(carry_form(EuroBertDecoderLayer), module.options, in_scan=True), L,
                          in_axes=(nn.broadcast,) * 4)
    x, (per_layer, p) = scanned(module.config, module.options, name="layers")(x, mask, rope, deterministic,
                                                                             output_attentions)
    return x, tuple(per_layer[i] for i in range(L)), tuple(None if p is None else p[i] for i in range(L))


class EuroBertModel(EuroBertModule):
    """The encoder. input_ids [B, T]; attention_mask [B, T] (1 = real token); position_ids [B, T] (default
    0..T-1). token_type_ids is accepted so BERT's callers can pass it; EuroBERT has no token types and does not
    read it.

    segment_ids [B, T] (packed rows: 0 = padding, 1..k = the documents of a row; jaxbert.model.segments):
    attention stays within each document and the rotary positions restart at 0 at each document's start
    (unless position_ids are given); None computes as an unpacked row.

    Returns ModelOutput: last_hidden_state = norm(last layer) [B, T, H]; hidden_states (with
    output_hidden_states) as transformers 5 returns them: the embeddings, the outputs of layers 1 .. L - 1,
    and last_hidden_state (the last layer's output is seen only through the final norm); attentions
    [B, N, T, T] per layer.
    """

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        cfg, opts = self.config, self.options
        if head_mask is not None:
            raise ValueError("head_mask: EuroBERT has no head mask (transformers' EuroBertModel takes none)")
        B, T = input_ids.shape
        fused_path = attention.takes_fused(opts, cfg.attention_dropout, deterministic, output_attentions)
        mask = attention.layer_mask(fused_path, attention_mask, segment_ids, (B, T))
        rope = rope_tables(rotary_positions(position_ids, segment_ids, T), cfg.head_dim, cfg.theta, opts.dtype)
        x = self.embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"), "embed_tokens",
                       pad_row=cfg.pad_token_id)(input_ids)
        x = constrain_batch(padding_row_frozen(x, input_ids, cfg.pad_token_id))
        if opts.scan_layers:
            last, states, probs = _scanned_layers(self, x, mask, rope, deterministic, output_attentions)
        else:
            last, states, probs = _Layers(cfg, opts, name="layers")(x, mask, rope, deterministic, output_attentions)
        final = self.norm("norm")(last)
        return ModelOutput(last_hidden_state=final,
                           hidden_states=(x,) + states[:-1] + (final,) if output_hidden_states else None,
                           attentions=probs if output_attentions else None)
