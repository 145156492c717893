"""Shared pieces of the BERT modules: options, activations, initialisers, outputs."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from jaxbert.model.config import BertConfig
from jaxbert.model.dropout import DROPOUT_IMPLS, make_dropout

Array = jax.Array

ATTENTION_IMPLS = ("einsum", "dot_product")
LAYER_INPUT = "layer_input"  # checkpoint_name of each layer's input, the value remat_policy "offload" moves
REMAT_POLICIES = {
    "none": None,  # no remat
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    # full's recomputation, with each layer's input (the one thing full keeps) moved to the host's pinned
    # memory in the forward pass and fetched back for the backward: device memory then holds no activation
    # per layer, at the price of L x [B, T, H] crossing the host link twice per step.
    "offload": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=[LAYER_INPUT],
        offload_src="device", offload_dst="pinned_host"),
}


def _gelu_tanh(x):
    return jax.nn.gelu(x, approximate=True)


_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


@jax.custom_vjp
def gelu_exact(x: Array) -> Array:
    """x * Phi(x) with the erf form of Phi, as jax.nn.gelu(approximate=False).

    Its backward reuses Phi(x) from the forward pass: plain autodiff evaluates
    erf a second time there, which on CPU cost ~1.5% of a bert-base train step.
    """
    return _gelu_exact_fwd(x)[0]


def _gelu_exact_fwd(x):
    cdf = 0.5 + 0.5 * jax.lax.erf(x * _SQRT_HALF).astype(x.dtype)
    return x * cdf, (x, cdf)


def _gelu_exact_bwd(res, g):
    x, cdf = res
    pdf = jnp.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return (g * (cdf + x * pdf),)


gelu_exact.defvjp(_gelu_exact_fwd, _gelu_exact_bwd)


ACT_FNS: dict[str, Callable[[Array], Array]] = {
    # transformers' "gelu" is the exact erf form; "gelu_new" and friends are the tanh form.
    "gelu": gelu_exact,
    "gelu_python": gelu_exact,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "linear": lambda x: x,
}


# (mesh, axis name) the batch dim of activations is split over while a sharded step is traced.
_BATCH_AXIS: list = [None]


@contextlib.contextmanager
def batch_sharded_activations(mesh, axis: str):
    """Trace a step under this to pin every activation's leading (batch) dim to `axis` of `mesh`.

    With FSDP the params are split along their hidden dims; left to itself, GSPMD
    propagates that split into the activations instead of gathering the weights:
    a scanned bert-large step on a v4-8 held [global batch, T, I] intermediates
    whole on every device (2.6 GiB of temporaries at 16 x 512 per device). The
    constraint keeps each device on its own rows, as data parallelism means.
    Outside the context (one device, pmap, inference) nothing is constrained.
    """
    previous, _BATCH_AXIS[0] = _BATCH_AXIS[0], (mesh, axis)
    try:
        yield
    finally:
        _BATCH_AXIS[0] = previous


def shard_batch_dim(x: Array) -> Array:
    """x split over the batch mesh axis along its leading dim (when a step traced
    under batch_sharded_activations asks for it and the dim divides)."""
    if _BATCH_AXIS[0] is None:
        return x
    mesh, axis = _BATCH_AXIS[0]
    if x.ndim == 0 or x.shape[0] % mesh.shape[axis]:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(axis)))


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

    Attributes:
      config: the model description (transformers' fields).
      dtype: compute dtype (activations, matmuls).
      param_dtype: dtype the params are created in.
      scan_layers: nn.scan over the layer stack; one layer is compiled, and the
        per-layer param dicts become one dict with a leading layer axis.
      remat_policy: gradient checkpointing per layer, one of REMAT_POLICIES.
      attention_impl: "einsum" (explicit softmax) or "dot_product"
        (jax.nn.dot_product_attention, cuDNN flash attention on GPU).
      attention_chunks: split the einsum attention into this many blocks of queries,
        each recomputed in the backward pass (jax.checkpoint), so that one block's
        [B, N, T / chunks, S] scores are held at a time; 1 = whole. Used where it
        divides T and attention probabilities are not returned.
      ffn_chunks: the same for each layer's feed-forward block (dense(I) -> act ->
        dense(H) -> dropout -> add & LayerNorm, all per token): blocks of T / chunks
        tokens, each recomputed in the backward pass, so one block's [B, T / chunks, I]
        is held at a time; 1 = whole. Used where it divides T.
      dropout_impl: where dropout's random bits come from, one of DROPOUT_IMPLS:
        "threefry" (flax's nn.Dropout) or "hash" (jaxbert.model.dropout.HashDropout,
        a counter hash: far fewer operations per element on TPU).
      decode: autoregressive decoding with a key/value cache in the 'cache'
        collection (decoder configs); init sizes the cache from its input.
    """

    config: BertConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    scan_layers: bool = False
    remat_policy: str = "none"
    attention_impl: str = "einsum"
    attention_chunks: int = 1
    ffn_chunks: int = 1
    dropout_impl: str = "threefry"
    decode: bool = False

    def options(self) -> dict[str, Any]:
        """Keyword arguments that hand this module's config and options to a child."""
        return dict(config=self.config, dtype=self.dtype, param_dtype=self.param_dtype,
                    scan_layers=self.scan_layers, remat_policy=self.remat_policy,
                    attention_impl=self.attention_impl, attention_chunks=self.attention_chunks,
                    ffn_chunks=self.ffn_chunks, dropout_impl=self.dropout_impl, decode=self.decode)

    def require_hash_dropout(self, option: str, what: str) -> None:
        """A dropout applied block by block needs dropout_impl 'hash': its mask is a function of each
        element's position, so a block's mask is the slice of the whole one; threefry's has no such form."""
        if self.dropout_impl != "hash":
            raise ValueError(f"{option}={getattr(self, option)} with {what} dropout needs dropout_impl 'hash' "
                             f"(got {self.dropout_impl!r})")

    def dropout_layer(self, rate: float):
        """The dropout layer this module's dropout_impl names (no params; same call as nn.Dropout)."""
        return make_dropout(self.dropout_impl, rate)

    def dense(self, features: int, axes: tuple, name: str, use_bias: bool = True) -> nn.Dense:
        """A Dense with transformers' init: normal(initializer_range) kernel, zero bias."""
        return Dense(
            features, use_bias=use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.normal(self.config.initializer_range), axes),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
            name=name)

    def layer_norm(self, name: str = "LayerNorm") -> nn.LayerNorm:
        # use_fast_variance=False: two-pass variance, as PyTorch computes it.
        return nn.LayerNorm(
            epsilon=self.config.layer_norm_eps, dtype=self.dtype, param_dtype=self.param_dtype,
            use_fast_variance=False,
            scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name=name)

    def embed(self, num: int, features: int, axes: tuple, name: str, pad_row: int | None = None):
        init = nn.initializers.normal(self.config.initializer_range)
        if pad_row is not None:
            init = _zero_row(init, pad_row)
        return nn.Embed(num, features, dtype=self.dtype, param_dtype=self.param_dtype,
                        embedding_init=nn.with_logical_partitioning(init, axes), name=name)


    def vocab_logits(self, x, word_embeddings=None):
        """x [B, M, H] -> logits [B, M, V]: the decoder (tied to word_embeddings [V, H] unless the
        config unties it) plus the output bias. Call it from a compact method: it creates params."""
        cfg = self.config
        if cfg.tie_word_embeddings:
            logits = jnp.einsum("BMH,VH->BMV", x, word_embeddings.astype(self.dtype))
        else:
            logits = self.dense(cfg.vocab_size, ("embed", "vocab"), "decoder", use_bias=False)(x)
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (cfg.vocab_size,), self.param_dtype)
        return logits + bias.astype(self.dtype)


class Dense(nn.Dense):
    """nn.Dense (same params, init and dtype promotion) that multiplies as one
    2-D matmul [prod(leading dims), in] x [in, out].

    The 3-D einsum nn.Dense emits for [B, T, H] inputs makes XLA's CPU backend
    transpose activations before each weight-gradient matmul; the 2-D form
    does not, and a bert-base train step on CPU ran ~8% faster with it.
    """

    @nn.compact
    def __call__(self, inputs: Array) -> Array:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features),
                            self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        inputs, kernel, bias = nn.dtypes.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = jnp.dot(inputs.reshape(-1, inputs.shape[-1]), kernel, precision=self.precision)
        y = shard_batch_dim(y.reshape(inputs.shape[:-1] + (self.features,)))
        return y if bias is None else y + bias


def _zero_row(init, row: int):
    """transformers zeroes the padding_idx row of the word embeddings at init."""
    def wrapped(key, shape, dtype=jnp.float32):
        return init(key, shape, dtype).at[row].set(0)
    return wrapped


def validate_options(module: BertModule) -> None:
    if module.attention_impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention_impl {module.attention_impl!r} is unknown; expected one of {ATTENTION_IMPLS}")
    for name in ("attention_chunks", "ffn_chunks"):
        value = getattr(module, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if module.dropout_impl not in DROPOUT_IMPLS:
        raise ValueError(f"dropout_impl {module.dropout_impl!r} is unknown; expected one of {DROPOUT_IMPLS}")
    if module.remat_policy not in REMAT_POLICIES:
        raise ValueError(f"remat_policy {module.remat_policy!r} is unknown; expected one of {tuple(REMAT_POLICIES)}")
