"""The base of every BERT module (config + options, transformers' initialisers), the 2-D Dense,
and ModelOutput, what every model returns."""

from __future__ import annotations

import functools
import math
from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.model.config import BertConfig
from jaxbert.model.dropout import make_dropout
from jaxbert.model.layers.norms import layer_norm
from jaxbert.model.options import ModelOptions, constrain_batch, cpu_target
from jaxbert.model.vocab_loss import VocabProjection, uses_chunks

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

    config: BertConfig
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
        cfg = self.config
        chunk = uses_chunks(cfg.vocab_size, self.options.vocab_loss_chunk)
        untied = None
        if not cfg.tie_word_embeddings and chunk:  # the decoder's kernel, not applied: dense's param, as built there
            untied = DenseWeights(
                cfg.vocab_size, use_bias=False, dtype=self.options.dtype, param_dtype=self.options.param_dtype,
                kernel_init=nn.with_logical_partitioning(nn.initializers.normal(cfg.initializer_range),
                                                         ("embed", "vocab")), name="decoder")(x)
        elif not cfg.tie_word_embeddings:
            untied = self.dense(cfg.vocab_size, ("embed", "vocab"), "decoder", use_bias=False)(x)
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (cfg.vocab_size,), self.options.param_dtype).astype(self.options.dtype)
        if chunk:
            weight = word_embeddings.astype(self.options.dtype) if untied is None else untied[0]
            return VocabProjection(x, weight, bias, chunk=chunk, columns=untied is not None)
        if untied is None:
            return tied_logits(x, word_embeddings.astype(self.options.dtype), bias)
        return untied + bias


class Dense(nn.Dense):
    """nn.Dense (same params, init and dtype promotion) that multiplies as one
    2-D matmul [prod(leading dims), in] x [in, out].

    The 3-D einsum nn.Dense emits for [B, T, H] inputs makes XLA's CPU backend
    transpose activations before each weight-gradient matmul; the 2-D form
    does not.
    """

    @nn.compact
    def __call__(self, inputs: Array) -> Array:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features),
                            self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        inputs, kernel, bias = nn.dtypes.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = jnp.dot(inputs.reshape(-1, inputs.shape[-1]), kernel, precision=self.precision)
        y = constrain_batch(y.reshape(inputs.shape[:-1] + (self.features,)))
        return y if bias is None else y + bias


class EinsumDense(Dense):
    """Dense's params ([in, out] kernel, [out] bias, same init) applied as one einsum over a view of them:
    `spec` reads the kernel reshaped to `kernel_view` and adds the bias reshaped to `bias_view`. A layer that
    wants its output in another layout (attention heads first, say) gets it from the matmul itself instead of
    a transpose after it."""

    spec: str = ""
    kernel_view: tuple = ()
    bias_view: tuple = ()

    @nn.compact
    def __call__(self, inputs: Array) -> Array:
        kernel = self.param("kernel", self.kernel_init, (math.prod(self.kernel_view) // self.features, self.features),
                            self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        inputs, kernel, bias = nn.dtypes.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = jnp.einsum(self.spec, inputs, kernel.reshape(self.kernel_view), precision=self.precision)
        return y if bias is None else y + bias.reshape(self.bias_view)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def take_rows(table, ids, num_rows: int):
    """table[ids] (rows of a [V, H] table), whose gradient is one_hot(ids)^T @ g: a matmul.

    The usual gradient of a lookup is a scatter-add of every position's cotangent into its row. For a
    table of few rows that the whole batch reads (token types: 2 rows for B x L lookups; positions: B
    lookups of each row) that scatter serialises on atomics: on an H100 it took half of bert-base's
    train step (docs/benchmarks.md). The one-hot matmul sums the same cotangents, in float32 (or
    wider) whatever the compute dtype, at full precision. Out-of-range ids get no gradient (as the
    scatter drops them)."""
    return jnp.take(table, ids, axis=0)


def _take_rows_fwd(table, ids, num_rows):
    return jnp.take(table, ids, axis=0), (ids, jnp.zeros((), table.dtype))


def _take_rows_bwd(num_rows, res, g):
    ids, like = res
    acc = jnp.promote_types(g.dtype, jnp.float32)
    onehot = jax.nn.one_hot(ids.reshape(-1), num_rows, dtype=g.dtype)
    grad = jnp.matmul(onehot.T, g.reshape(-1, g.shape[-1]), precision=jax.lax.Precision.HIGHEST,
                      preferred_element_type=acc)
    zero_ids = np.zeros(ids.shape, jax.dtypes.float0)
    return grad.astype(like.dtype), zero_ids


take_rows.defvjp(_take_rows_fwd, _take_rows_bwd)


def tied_logits(x: Array, table: Array, bias: Optional[Array]) -> Array:
    """x [..., H] -> logits [..., V]: x times the tied decoder's table [V, H] transposed, plus bias [V] (or None).

    Where the step is compiled for a CPU its backward is written out (_tied_logits): autodiff's, as XLA's CPU
    backend runs it, took the bias gradient, a sum over the B x M rows of the [B, M, V] logits' cotangent, at
    about 6 ns an element (285 ms of a 6-layer, hidden-384 ModernBERT's 3.1 s step at 8 x 512, 30% masked,
    V = 50,368), and the table's gradient as a [V, B x M] x [B x M, H] matmul after transposing the cotangent
    (465 ms). Written out, the bias gradient is the same sum as a matmul by ones (8 ms) and the table's is
    formed [H, V] and transposed (270 ms). Elsewhere autodiff's is kept."""
    if cpu_target():
        return _tied_logits(x, table, bias)
    logits = jnp.einsum("...H,VH->...V", x, table)
    return logits if bias is None else logits + bias


@jax.custom_vjp
def _tied_logits(x, table, bias):
    # one 2-D matmul over the rows [B x M, H], as Dense multiplies (the same values as the einsum)
    logits = jnp.dot(x.reshape(-1, x.shape[-1]), table.T)
    logits = logits if bias is None else logits + bias
    return logits.reshape(*x.shape[:-1], table.shape[0])


def _tied_logits_fwd(x, table, bias):
    return _tied_logits(x, table, bias), (x, table, bias)


def _tied_logits_bwd(res, g):
    x, table, bias = res
    rows = g.reshape(-1, g.shape[-1])  # [B x M, V]
    dx = jnp.dot(rows, table).reshape(x.shape)
    dtable = jnp.dot(x.reshape(-1, x.shape[-1]).T, rows).T  # formed [H, V]: the cotangent read as it lies
    dbias = None
    if bias is not None:
        ones = jnp.ones((rows.shape[0],), rows.dtype)
        dbias = jnp.dot(ones, rows, precision=jax.lax.Precision.HIGHEST,
                        preferred_element_type=jnp.promote_types(rows.dtype, jnp.float32)).astype(bias.dtype)
    return dx, dtable, dbias


_tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)


class DenseWeights(Dense):
    """Dense's params (the same names, shapes and init) returned, not applied: (kernel [in, out], bias [out]
    or None), in the compute dtype as Dense multiplies them; `inputs` gives only the in size. What a decoder
    hands the chunked MLM loss (jaxbert.model.vocab_loss) in place of its logits."""

    @nn.compact
    def __call__(self, inputs: Array) -> tuple:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        _, kernel, bias = nn.dtypes.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        return kernel, bias


# Above this many rows the one-hot operand [tokens, rows] grows large (an 8192-position table at
# 32 x 1024 tokens: 512 MB of bf16), so such tables keep nn.Embed's scatter. A chosen bound, not measured.
ONE_HOT_MAX_ROWS = 2048


class SmallTableEmbed(nn.Embed):
    """nn.Embed (same param, same forward) whose table gradient is a one-hot matmul (take_rows), for
    tables of at most ONE_HOT_MAX_ROWS rows."""

    def __call__(self, inputs):
        if self.num_embeddings > ONE_HOT_MAX_ROWS:
            return super().__call__(inputs)
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError("SmallTableEmbed: ids must be integers")
        (embedding,) = self.promote_dtype(self.embedding, dtype=self.dtype, inexact=False)
        return take_rows(embedding, inputs, self.num_embeddings)


def _zero_row(init, row: int):
    """transformers zeroes the padding_idx row of the word embeddings at init."""
    def wrapped(key, shape, dtype=jnp.float32):
        return init(key, shape, dtype).at[row].set(0)
    return wrapped
