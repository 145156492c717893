"""The base of DeBERTa-v2's modules: BertModule's config, options and initialisers (transformers' DeBERTa init:
normal(initializer_range) Linear and Embedding weights, zero biases, LayerNorm weights one), plain-array init."""

from __future__ import annotations

import flax.linen as nn

from jaxbert.model.base import BertModule


class DebertaV2Module(BertModule):
    """config: a DebertaV2Config; options: ModelOptions."""

    def init_boxed(self, rngs, *args, **kwargs):
        """init with the logical-axis metadata (nn.Partitioned) that training shards by."""
        return nn.Module.init(self, rngs, *args, **kwargs)

    def init(self, rngs, *args, **kwargs):
        """Plain arrays named as in transformers."""
        return nn.meta.unbox(self.init_boxed(rngs, *args, **kwargs))
