"""Tiny random models and inputs shared by the parity tests."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert import BertConfig, dummy_inputs
from jaxbert.parity.inputs import make_inputs

TINY = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=40)
TEXTS = ["a b ||| c d e", "a b c d e f g h ||| i j k l m", "a ||| b"]


def _random_params(module, seed=0):
    """init, then jitter every leaf so biases and LayerNorms are not trivially 0 / 1."""
    name = type(module).__name__
    kw = {}
    if module.config.add_cross_attention:
        kw["encoder_hidden_states"] = jnp.zeros((1, 3, module.config.hidden_size))
    params = module.init(jax.random.key(seed), *dummy_inputs(name, 1, 8), **kw)["params"]
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [x + 0.02 * jax.random.normal(k, x.shape)
                                               for x, k in zip(leaves, keys)])


def _inputs(name, padded: bool):
    inputs = make_inputs(None, TEXTS, 64, TINY.vocab_size, seed=3,
                         choices=2 if name == "BertForMultipleChoice" else 0)
    if not padded:  # every row filled with real tokens: no padding anywhere, same shape
        rng = np.random.default_rng(4)
        inputs = dict(inputs, input_ids=rng.integers(1, TINY.vocab_size, inputs["input_ids"].shape, np.int32),
                      attention_mask=np.ones_like(inputs["attention_mask"]))
    else:
        assert not inputs["attention_mask"].all()
    return inputs
