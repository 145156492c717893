"""The masked-LM loss over the vocabulary in chunks: no [tokens, V] logits array, forward or backward.

With EuroBERT's 128,256 tokens or mmBERT's 256,000, the MLM head's logits at the masked positions of one
micro-batch (8 x 512 tokens, 30% masked: 1,229 rows) are 630 MB / 1.26 GB in float32, and autodiff holds
them and their cotangent. ``vocab_nll`` takes the transformed hidden states, the decoder's weight and bias
instead, and walks the vocabulary ``chunk`` columns at a time (lax.scan): the forward pass keeps an online
logsumexp, the label's logit and the running argmax; the backward pass recomputes each chunk's logits from
the saved logsumexp (one more [N, H] x [H, chunk] matmul per chunk) and writes that chunk's weight and bias
gradients in place. Memory follows the chunk: [N, chunk] at a time.

The MLM step asks for it (``deferred_vocab_logits``); the heads then return a ``VocabProjection`` (hidden,
weight, bias) in ``logits`` where ``uses_chunks`` says so: ModelOptions.vocab_loss_chunk, by default chunks
of DEFAULT_CHUNK where the vocabulary has AUTO_MIN_VOCAB entries or more. The params are the heads' own
either way (same names, shapes and init), so checkpoints and conversion do not see the difference.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array

# Vocabularies of this many entries or more take the chunked loss unless ModelOptions.vocab_loss_chunk says
# otherwise: 64k, below which the [tokens, V] logits are at most about half of BERT-base's layer activations
# at 8 x 512 (and the demo's 4,096-token vocabulary keeps its plain path, and its fingerprint).
AUTO_MIN_VOCAB = 65536
# Columns per chunk by default: [N, 8192] float32 is 40 MB at N = 1,229 (8 x 512 tokens, 30% masked); 16 chunks
# for EuroBERT's vocabulary, 32 for mmBERT's. A chosen size (docs/benchmarks.md has a CPU sweep).
DEFAULT_CHUNK = 8192

_DEFERRED = contextvars.ContextVar("jaxbert_deferred_vocab_logits", default=False)


@contextlib.contextmanager
def deferred_vocab_logits():
    """Inside it, an MLM head traced whose options choose the chunked loss (``uses_chunks``) returns a
    VocabProjection in place of its logits. The MLM train and eval steps trace their forward pass in it;
    nothing else does, so inference, parity and conversion always see logits."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def loss_chunk(vocab_size: int, option: Optional[int]) -> int:
    """Columns per chunk of the MLM loss for a vocabulary, as ModelOptions.vocab_loss_chunk sets it; 0 = the
    plain [tokens, V] logits. None (the default): DEFAULT_CHUNK from AUTO_MIN_VOCAB entries up, plain below;
    0: always plain; n > 0: always chunks of n (at most V)."""
    if option is None:
        return DEFAULT_CHUNK if vocab_size >= AUTO_MIN_VOCAB else 0
    return min(int(option), vocab_size)


def uses_chunks(vocab_size: int, option: Optional[int]) -> int:
    """The chunk a head traced now defers its logits to (0: it returns logits): loss_chunk's, inside
    deferred_vocab_logits only."""
    return loss_chunk(vocab_size, option) if _DEFERRED.get() else 0


@flax.struct.dataclass
class VocabProjection:
    """What an MLM head returns in ``logits`` under deferred_vocab_logits: the logits' factors, not them.

    Attributes:
      hidden: [..., H], the transformed hidden states (compute dtype).
      weight: the decoder's weight: [V, H] for a tied decoder (the word-embedding table), or [H, V] for an
        untied kernel (columns=True); in the compute dtype.
      bias: [V] or None.
      chunk: columns per chunk of the loss.
      columns: whether weight is a kernel [H, V].
    """

    hidden: Array
    weight: Array
    bias: Optional[Array]
    chunk: int = flax.struct.field(pytree_node=False)
    columns: bool = flax.struct.field(pytree_node=False, default=False)

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[1 if self.columns else 0]

    @property
    def dtype(self):
        """The logits' dtype (the compute dtype)."""
        return jnp.result_type(self.hidden, self.weight, *(() if self.bias is None else (self.bias,)))

    @property
    def shape(self) -> tuple:
        """The logits' shape [..., V]."""
        return (*self.hidden.shape[:-1], self.vocab_size)

    def logits(self) -> Array:
        """The whole logits [..., V], as the head would have returned them (for tests and inspection)."""
        w = self.weight if self.columns else self.weight.T
        out = jnp.dot(self.hidden.reshape(-1, self.hidden.shape[-1]), w)
        out = out if self.bias is None else out + self.bias
        return out.reshape(self.shape)

    def nll_and_predicted(self, labels: Array) -> tuple[Array, Array]:
        """vocab_nll of these factors: (-log softmax[label], argmax), both shaped like labels."""
        return vocab_nll(self.hidden, self.weight, self.bias, labels, chunk=self.chunk, columns=self.columns)


def vocab_nll(hidden: Array, weight: Array, bias: Optional[Array], labels: Array, *, chunk: int,
              columns: bool = False) -> tuple[Array, Array]:
    """The cross-entropy of logits = hidden @ W^T + bias at labels, and their argmax, over vocabulary chunks.

    Args:
      hidden: [..., H].
      weight: [V, H] (a tied table), or [H, V] with columns=True (an untied kernel).
      bias: [V] or None.
      labels: int [...]; a negative label counts from the end, as take_along_axis reads it.
      chunk: columns per chunk; V need not be a multiple (the last chunk is shorter).
    Returns:
      nll: [...] in float32 at least (the compute dtype when wider): logsumexp(logits) - logits[label].
      predicted: int32 [...], jnp.argmax(logits, -1): the first index of the largest logit (of the first
        NaN, if any).
    Differentiable in hidden, weight and bias (not through predicted); the backward pass recomputes each
    chunk's logits, so no [..., V] array is held in either pass. The logits are formed in the compute dtype
    (bf16 logits as the head's would be), then widened for the reductions.
    """
    if chunk < 1:
        raise ValueError(f"vocab_nll: chunk must be a positive integer, got {chunk!r}")
    lead = hidden.shape[:-1]
    x = hidden.reshape(-1, hidden.shape[-1])
    nll, pred = _vocab_nll(x, weight, bias, labels.reshape(-1), int(chunk), bool(columns))
    return nll.reshape(lead), pred.reshape(lead)


def _pieces(V: int, chunk: int) -> tuple[int, int, int]:
    """(columns per chunk, number of whole chunks, columns of the last, shorter chunk)."""
    C = min(chunk, V)
    return C, V // C, V % C


def _chunk_logits(x, weight, bias, start, size: int, columns: bool):
    """x [N, H] against columns [start, start + size) of the decoder: (logits [N, size], the weight slice)."""
    w = lax.dynamic_slice_in_dim(weight, start, size, axis=1 if columns else 0)
    if columns:  # [H, size]
        logits = jnp.dot(x, w)
    else:  # [size, H], contracted on H as the tied decoder's x @ table.T
        logits = lax.dot_general(x, w, (((1,), (1,)), ((), ())))
    if bias is not None:
        logits = logits + lax.dynamic_slice_in_dim(bias, start, size)
    return logits, w


def _shift(m):
    """The logsumexp's shift: the running max where finite, else 0 (as jax.nn.logsumexp)."""
    return jnp.where(jnp.isfinite(m), m, 0.0)


def _walk(body, carry, V: int, chunk: int):
    """carry through body(carry, start, size) over the whole chunks (a lax.scan) and the shorter last one."""
    C, n, rest = _pieces(V, chunk)
    if n:
        carry, _ = lax.scan(lambda c, start: (body(c, start, C), None), carry,
                            jnp.arange(n, dtype=jnp.int32) * C)
    if rest:
        carry = body(carry, n * C, rest)
    return carry


def _label_index(labels, V: int):
    labels = labels.astype(jnp.int32)
    return jnp.where(labels < 0, labels + V, labels)


def _forward(x, weight, bias, labels, chunk: int, columns: bool):
    V = weight.shape[1 if columns else 0]
    dtype = jnp.result_type(x, weight, *(() if bias is None else (bias,)))
    acc = jnp.promote_types(dtype, jnp.float32)
    index = _label_index(labels, V)
    N = x.shape[0]

    def body(carry, start, size):
        m, s, picked, best, best_at = carry
        logits = _chunk_logits(x, weight, bias, start, size, columns)[0].astype(acc)  # [N, size]
        top = jnp.max(logits, axis=-1)
        # online logsumexp: s = sum exp(logits - shift(m)) over the chunks so far
        new_m = jnp.maximum(m, top)
        scale = jnp.where(m == -jnp.inf, 0.0, jnp.exp(_shift(m) - _shift(new_m)))
        s = s * scale + jnp.sum(jnp.exp(logits - _shift(new_m)[:, None]), axis=-1)
        # the label's logit, where this chunk holds it
        local = index - start
        inside = (local >= 0) & (local < size)
        here = jnp.take_along_axis(logits, jnp.clip(local, 0, size - 1)[:, None], axis=-1)[:, 0]
        picked = jnp.where(inside, here, picked)
        # argmax as two plain min-reductions (XLA's CPU backend runs argmax's paired reduction ~10x slower):
        # the first NaN, else the first entry equal to the max. Across chunks an earlier one wins ties.
        iota = lax.broadcasted_iota(jnp.int32, logits.shape, 1)
        first_nan = jnp.min(jnp.where(jnp.isnan(logits), iota, size), axis=-1)
        first_top = jnp.min(jnp.where(logits == top[:, None], iota, size), axis=-1)
        has_nan = first_nan < size
        value = jnp.where(has_nan, jnp.nan, top).astype(acc)
        at = jnp.where(has_nan, first_nan, first_top) + start
        better = (jnp.isnan(value) & ~jnp.isnan(best)) | (value > best)
        return new_m, s, picked, jnp.where(better, value, best), jnp.where(better, at, best_at)

    init = (jnp.full((N,), -jnp.inf, acc), jnp.zeros((N,), acc), jnp.zeros((N,), acc),
            jnp.full((N,), -jnp.inf, acc), jnp.zeros((N,), jnp.int32))
    m, s, picked, _, best_at = _walk(body, init, V, chunk)
    log_z = jnp.log(s) + _shift(m)
    return log_z - picked, best_at, log_z


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _vocab_nll(x, weight, bias, labels, chunk: int, columns: bool):
    nll, pred, _ = _forward(x, weight, bias, labels, chunk, columns)
    return nll, pred


def _vocab_nll_fwd(x, weight, bias, labels, chunk, columns):
    nll, pred, log_z = _forward(x, weight, bias, labels, chunk, columns)
    return (nll, pred), (x, weight, bias, labels, log_z)


def _vocab_nll_bwd(chunk, columns, res, g):
    x, weight, bias, labels, log_z = res
    return _backward(x, weight, bias, labels, log_z, g[0], chunk, columns)


def _backward(x, weight, bias, labels, log_z, g, chunk: int, columns: bool):
    V = weight.shape[1 if columns else 0]
    dtype = jnp.result_type(x, weight, *(() if bias is None else (bias,)))
    acc = log_z.dtype
    index = _label_index(labels, V)
    g = g.astype(acc)
    ones = jnp.ones((x.shape[0],), dtype)

    def body(carry, start, size):
        dx, dw, db = carry
        logits, w = _chunk_logits(x, weight, bias, start, size, columns)
        probs = jnp.exp(logits.astype(acc) - log_z[:, None])
        onehot = lax.broadcasted_iota(jnp.int32, logits.shape, 1) == (index - start)[:, None]
        # d nll / d logits = softmax - onehot, in the logits' dtype (as cross_entropy's own backward)
        gl = ((probs - onehot.astype(acc)) * g[:, None]).astype(dtype)  # [N, size]
        if columns:  # w [H, size]
            dx = dx + jnp.dot(gl, w.T, preferred_element_type=acc)
            dw_c = jnp.dot(x.T, gl, preferred_element_type=acc)  # [H, size]
        else:  # w [size, H]
            dx = dx + jnp.dot(gl, w, preferred_element_type=acc)
            # formed [H, size] and transposed: XLA's CPU backend transposes the cotangent otherwise (tied_logits)
            dw_c = jnp.dot(x.T, gl, preferred_element_type=acc).T  # [size, H]
        dw = lax.dynamic_update_slice_in_dim(dw, dw_c.astype(dw.dtype), start, axis=1 if columns else 0)
        if db is not None:  # the bias gradient, a sum over the rows, as a ones-matmul accumulated in float32
            db_c = jnp.dot(ones, gl, precision=lax.Precision.HIGHEST, preferred_element_type=acc)
            db = lax.dynamic_update_slice_in_dim(db, db_c.astype(db.dtype), start, axis=0)
        return dx, dw, db

    init = (jnp.zeros(x.shape, acc), jnp.zeros(weight.shape, weight.dtype),
            None if bias is None else jnp.zeros(bias.shape, bias.dtype))
    dx, dw, db = _walk(body, init, V, chunk)
    return dx.astype(x.dtype), dw, db, np.zeros(labels.shape, jax.dtypes.float0)


_vocab_nll.defvjp(_vocab_nll_fwd, _vocab_nll_bwd)
