"""The base of every ModernBERT module: BertModule's options and dropout, with ModernBERT's
initialisers (truncated normal per role) and its bias-optional linears and LayerNorms."""

from __future__ import annotations

import math

import flax.linen as nn

from jaxbert.model.base import BertModule
from jaxbert.model.layers.dense import Dense, EinsumDense
from jaxbert.model.layers.norms import layer_norm


class ModernBertModule(BertModule):
    """config: a ModernBertConfig; options: ModelOptions (dtype, scan, remat, attention, chunks, dropout)."""

    def init_boxed(self, rngs, *args, **kwargs):
        """init with the logical-axis metadata (nn.Partitioned) that training shards by."""
        return nn.Module.init(self, rngs, *args, **kwargs)

    def init(self, rngs, *args, **kwargs):
        """Plain arrays named as in transformers (as BertPreTrainedModel.init)."""
        return nn.meta.unbox(self.init_boxed(rngs, *args, **kwargs))

    # The per-role standard deviations of transformers' _init_weights; every weight is drawn from a
    # normal truncated at config.cutoff of them.
    @property
    def std_in(self) -> float:  # Wqkv, mlp.Wi, tok_embeddings
        return self.config.initializer_range

    @property
    def std_out(self) -> float:  # attn.Wo, mlp.Wo, head.dense, an untied decoder
        return self.config.initializer_range / math.sqrt(2.0 * self.config.num_hidden_layers)

    @property
    def std_final(self) -> float:  # the classifiers
        return self.config.hidden_size ** -0.5

    def trunc_normal(self, std: float):
        c = self.config.cutoff
        return nn.initializers.truncated_normal(std, lower=-c, upper=c)

    def linear(self, features: int, axes: tuple, name: str, use_bias: bool, std: float, cls=Dense, **view) -> Dense:
        """A Linear under transformers' name: kernel [in, out] from the truncated normal, zero bias."""
        return cls(
            features, use_bias=use_bias, dtype=self.options.dtype, param_dtype=self.options.param_dtype,
            kernel_init=nn.with_logical_partitioning(self.trunc_normal(std), axes),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
            name=name, **view)

    def linear_view(self, features: int, axes: tuple, name: str, use_bias: bool, std: float, spec: str,
                    kernel_view: tuple, bias_view: tuple) -> EinsumDense:
        """linear's params (the same names, shapes and init), applied as einsum `spec` over the kernel viewed
        as `kernel_view` (its bias as `bias_view`): an output laid out as the next op wants it."""
        return self.linear(features, axes, name, use_bias, std, EinsumDense, spec=spec, kernel_view=kernel_view,
                           bias_view=bias_view)

    def norm(self, name: str) -> nn.LayerNorm:
        """LayerNorm(norm_eps), with a bias only when config.norm_bias (ModernBERT's default has none)."""
        return layer_norm(self.config.norm_eps, self.options, name, use_bias=self.config.norm_bias)

    def embed(self, num: int, features: int, axes: tuple, name: str, pad_row=None):
        return nn.Embed(num, features, dtype=self.options.dtype, param_dtype=self.options.param_dtype,
                        embedding_init=nn.with_logical_partitioning(self.trunc_normal(self.std_in), axes),
                        name=name)

