"""The base of every BERT module (config + options, transformers' initialisers),
and ModelOutput, what every model returns."""

from __future__ import annotations

from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model.hf_config import HFConfig
from jaxbert.model.dropout import make_dropout
from jaxbert.model.layers.dense import Dense
from jaxbert.model.layers.embed import SmallTableEmbed
from jaxbert.model.layers.norms import layer_norm
from jaxbert.model.layers.vocab import vocab_decoder
from jaxbert.model.options import ModelOptions

Array = jax.Array


@flax.struct.dataclass
class ModelOutput:
    """What every jaxbert model returns; fields a model does not produce stay None.

    Field names follow transformers. Shapes: logits / prediction_logits [B, L, V]
    (or [B, M, V] when masked_positions [B, M] is given); last_hidden_state
    [B, L, H]; pooler_output [B, H]; hidden_states a tuple of num_layers + 1
    arrays [B, L, H] (embeddings first); attentions a tuple of [B, N, L, L].
    """

    logits: Optional[Array] = None
    last_hidden_state: Optional[Array] = None
    pooler_output: Optional[Array] = None
    hidden_states: Optional[tuple] = None
    attentions: Optional[tuple] = None
    cross_attentions: Optional[tuple] = None
    prediction_logits: Optional[Array] = None
    seq_relationship_logits: Optional[Array] = None
    start_logits: Optional[Array] = None
    end_logits: Optional[Array] = None


class BertModule(nn.Module):
    """Base of every jaxbert module: the whole config plus the run-time options.

    Children are built as ``Child(self.config, self.options, name=...)``.

    Attributes:
      config: the model description (transformers' fields).
      options: how it computes (dtype, scan, remat, attention and dropout implementations).
    """

    config: HFConfig  # a family's config: BertConfig, ModernBertConfig, ...
    options: ModelOptions = ModelOptions()

    def require_hash_dropout(self, option: str, what: str) -> None:
        """A dropout applied block by block needs dropout_impl 'hash': its mask is a function of each
        element's position, so a block's mask is the slice of the whole one; threefry's has no such form."""
        if self.options.dropout_impl != "hash":
            raise ValueError(f"{option}={getattr(self.options, option)} with {what} dropout needs dropout_impl "
                             f"'hash' (got {self.options.dropout_impl!r})")

    def dropout_layer(self, rate: float):
        """The dropout layer this module's dropout_impl names (no params; same call as nn.Dropout)."""
        return make_dropout(self.options.dropout_impl, rate)

    def dense(self, features: int, axes: tuple, name: str, use_bias: bool = True) -> nn.Dense:
        """A Dense with transformers' init: normal(initializer_range) kernel, zero bias."""
        return Dense(
            features, use_bias=use_bias, dtype=self.options.dtype, param_dtype=self.options.param_dtype,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.normal(self.config.initializer_range), axes),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
            name=name)

    def layer_norm(self, name: str = "LayerNorm") -> nn.LayerNorm:
        return layer_norm(self.config.layer_norm_eps, self.options, name)

    def embed(self, num: int, features: int, axes: tuple, name: str, pad_row: int | None = None,
              small: bool = False):
        """An nn.Embed with transformers' init. `small`: a table of few rows that every row of the batch
        looks up (positions, token types): its gradient is a one-hot matmul (SmallTableEmbed)."""
        init = nn.initializers.normal(self.config.initializer_range)
        if pad_row is not None:
            init = _zero_row(init, pad_row)
        cls = SmallTableEmbed if small else nn.Embed
        return cls(num, features, dtype=self.options.dtype, param_dtype=self.options.param_dtype,
                   embedding_init=nn.with_logical_partitioning(init, axes), name=name)

    def vocab_logits(self, x, word_embeddings=None):
        """x [B, M, H] -> logits [B, M, V]: the decoder (tied to word_embeddings [V, H] unless the
        config unties it) plus the output bias. Call it from a compact method: it creates params.

        Inside the MLM step's deferred_vocab_logits, where options.vocab_loss_chunk chooses the chunked
        loss for this vocabulary (jaxbert.model.vocab_loss), it returns a VocabProjection of x, the
        decoder's weight ([V, H] table or [H, V] kernel) and the bias instead: the same params."""
        cfg, opts = self.config, self.options
        table = word_embeddings.astype(opts.dtype) if cfg.tie_word_embeddings else None
        # Handed over in the param dtype: vocab_decoder casts it where it adds it, after the matmul, as this
        # head did until 2f77379 (same values). With the cast traced first, XLA's TPU compile of bert-base's
        # step staged buffers in on-chip memory otherwise, for 1.6 GB more bytes per step (docs/tpu.md, #50.31).
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (cfg.vocab_size,), opts.param_dtype)
        return vocab_decoder(x, table, name="decoder", vocab_size=cfg.vocab_size, use_bias=False,
                             init=nn.initializers.normal(cfg.initializer_range), options=opts, bias=bias)


def _zero_row(init, row: int):
    """transformers zeroes the padding_idx row of the word embeddings at init."""
    def wrapped(key, shape, dtype=jnp.float32):
        return init(key, shape, dtype).at[row].set(0)
    return wrapped
