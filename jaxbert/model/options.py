"""ModelOptions: how a model computes, as opposed to what it is (that is BertConfig).

One frozen object that every module carries beside the config; the recipe's ``model``
section builds it, ``build_model`` hands both to the model class. Activation sharding
goes through flax's logical axis rules: a module names the batch dim of what it returns
(``constrain_batch``), and a runner that splits the batch over a mesh maps that name to its
mesh axis with ``nn.logical_axis_rules``; outside such rules nothing is constrained.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model.dropout import DROPOUT_IMPLS

ATTENTION_IMPLS = ("einsum", "dot_product", "blocked", "splash", "auto")
RELATIVE_IMPLS = ("skew", "onehot", "fused", "auto")  # DeBERTa's relative terms (jaxbert.model.deberta_v2.attention)
LAYER_INPUT = "layer_input"  # checkpoint_name of each layer's input, the value remat_policy "offload" moves
# checkpoint_name of the fused attention's inputs (q, k, v as the kernel takes them) and output (the context;
# splash's softmax statistics too): what remat_policy "keep_attention" keeps
ATTENTION_IO = "attention_io"
REMAT_POLICIES = {
    "none": None,  # no remat
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    # full's recomputation, except the fused attention's inputs and outputs (ATTENTION_IO), which are kept: on
    # splash the backward pass runs no Wqkv, RoPE or forward kernel again (the blocked path still recomputes
    # its scores), for 4 [B, T, H]-sized arrays per layer. On the einsum and dot_product paths (nothing
    # named) it is full.
    "keep_attention": jax.checkpoint_policies.save_only_these_names(ATTENTION_IO),
    # full's recomputation, with each layer's input (the one thing full keeps) moved to the host's pinned
    # memory in the forward pass and fetched back for the backward: device memory then holds no activation
    # per layer, at the price of L x [B, T, H] crossing the host link twice per step.
    "offload": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=[LAYER_INPUT],
        offload_src="device", offload_dst="pinned_host"),
}
BATCH = "batch"  # logical name of the activations' leading (batch) dim


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """The run-time options of a model; ``ModelOptions()`` is plain float32, unscanned, no remat.

    Attributes:
      dtype: compute dtype (activations, matmuls).
      param_dtype: dtype the params are created in.
      scan_layers: nn.scan over the layer stack; one layer is compiled, and the
        per-layer param dicts become one dict with a leading layer axis.
      remat_policy: gradient checkpointing per layer, one of REMAT_POLICIES.
      attention_impl: "einsum" (explicit softmax) or "dot_product"
        (jax.nn.dot_product_attention: jax picks the implementation; with
        jax 0.10-0.11 that is its XLA one, cuDNN only when asked for, which jaxbert does not),
        or one that never holds a [B, N, T, T] array (jaxbert.model.fused): "blocked" (plain jax:
        sliding-window layers score each block of queries against the keys its window reaches, so
        memory and FLOPs grow as T x window; global layers run blocks of queries, each recomputed
        in the backward pass), "splash" (jax's Pallas splash attention kernel on TPU; interpreted,
        slowly, elsewhere) or "auto" (splash where the step is lowered for a TPU, blocked elsewhere).
        These three cover self-attention of encoders; what they cannot do (attention dropout in
        training, head_mask, returned attention probabilities, relative position embeddings,
        decoders) takes the einsum path; float64 runs splash and auto as blocked.
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
      first_token_only: heads that read only the first token's final state (sequence
        classification, multiple choice, next-sentence prediction) run the last layer's
        queries, feed-forward block and norms at that token alone; its keys and values still
        cover every token, so the logits are the same, with about 10/12 of one layer's
        per-token work saved. Their ``last_hidden_state`` is then [B, 1, H]. Not applied where
        hidden states or attentions are asked for, under decode, or with scan_layers.
      vocab_loss_chunk: how the MLM train and eval steps take the loss over the vocabulary
        (jaxbert.model.vocab_loss). None (the default): in chunks of 8,192 vocabulary entries where the
        vocabulary has 65,536 or more (EuroBERT's 128,256, mmBERT's 256,000), so that no [masked tokens, V]
        logits array is held, forward or backward (each chunk's logits are recomputed in the backward pass);
        the plain [masked tokens, V] logits below that. 0: always the plain logits; n > 0: always chunks of
        n entries. The loss, accuracy and gradients are the same either way (within float32 rounding), and
        so are the params; what the model returns outside those steps is always logits.
      relative_impl: how DeBERTa's relative terms (c2p, p2c) pick each score's relative-table row, one of
        RELATIVE_IMPLS: "skew" (products against every distance, skewed by reshapes), "onehot" (products against
        the table rows, then a matmul with a constant one-hot, no reshape), "fused" (the whole attention, terms
        included, in one Pallas kernel per sequence and head: jaxbert.model.deberta_v2.kernel; interpreted off a
        TPU) or "auto" (fused where the model is compiled for a TPU v5 or later and the length, padded to 128,
        is at most 512; onehot on an older TPU; skew elsewhere). fused runs where the probabilities are not
        returned and attention dropout, when active, is dropout_impl "hash" (it draws the same bits); elsewhere
        onehot on a TPU, skew otherwise. The same values every way (jaxbert.model.deberta_v2.attention).
    """

    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    scan_layers: bool = False
    remat_policy: str = "none"
    attention_impl: str = "einsum"
    attention_chunks: int = 1
    ffn_chunks: int = 1
    dropout_impl: str = "threefry"
    decode: bool = False
    first_token_only: bool = False
    vocab_loss_chunk: Optional[int] = None
    relative_impl: str = "auto"

    def __post_init__(self):
        for name in ("dtype", "param_dtype"):
            try:
                object.__setattr__(self, name, jnp.dtype(getattr(self, name)))
            except TypeError:
                raise ValueError(f"{name} {getattr(self, name)!r} is not a dtype") from None
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl {self.attention_impl!r} is unknown; expected one of {ATTENTION_IMPLS}")
        for name in ("attention_chunks", "ffn_chunks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        chunk = self.vocab_loss_chunk
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0):
            raise ValueError(f"vocab_loss_chunk must be None (auto), 0 (plain) or a positive integer, got {chunk!r}")
        if self.dropout_impl not in DROPOUT_IMPLS:
            raise ValueError(f"dropout_impl {self.dropout_impl!r} is unknown; expected one of {DROPOUT_IMPLS}")
        if self.relative_impl not in RELATIVE_IMPLS:
            raise ValueError(f"relative_impl {self.relative_impl!r} is unknown; expected one of {RELATIVE_IMPLS}")
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"remat_policy {self.remat_policy!r} is unknown; expected one of {tuple(REMAT_POLICIES)}")

    def replace(self, **changes) -> "ModelOptions":
        return dataclasses.replace(self, **changes)


def constrain_batch(x: jax.Array) -> jax.Array:
    """x with its leading dim split as the active logical axis rules map BATCH (unchanged outside them).

    With FSDP the params are split along their hidden dims; left to itself, GSPMD propagates
    that split into the activations instead of gathering the weights, and every device then
    holds whole-batch intermediates. Pinning the batch dim keeps each device on its own rows,
    as data parallelism means.
    """
    if x.ndim == 0:
        return x
    return nn.with_logical_constraint(x, (BATCH,) + (None,) * (x.ndim - 1))


_TARGET_KIND = contextvars.ContextVar("jaxbert_target_kind", default=None)


@contextlib.contextmanager
def compiling_for(devices):
    """Inside it, a model traced is compiled for `devices` (their `device_kind`, e.g. "TPU v4"): a module whose
    best lowering differs between kinds of device (TPU generations, a CPU) reads it (target_kind, cpu_target).
    The runners trace their steps in it, so a step compiled ahead of time for a TPU topology from a CPU box
    sees the topology's kind."""
    token = _TARGET_KIND.set(getattr(devices[0], "device_kind", None) if devices else None)
    try:
        yield
    finally:
        _TARGET_KIND.reset(token)


def target_kind() -> str:
    """The device_kind a model is being compiled for: compiling_for's, else the default backend's first device's."""
    kind = _TARGET_KIND.get()
    return kind if kind is not None else jax.devices()[0].device_kind


def cpu_target() -> bool:
    """Whether the model is being compiled for a CPU (target_kind "cpu"). What XLA's CPU backend runs slowly is
    then written another way, with the same values: the tied decoder's backward (jaxbert.model.layers.vocab.tied_logits),
    the MLM accuracy's argmax (jaxbert.engine.step.predicted), ModernBERT's Wqkv (RotaryQKV)."""
    return target_kind() == "cpu"
