"""Linear layers as the families' checkpoints hold them (kernel [in, out], bias [out]), multiplied the way
XLA lays out best: one 2-D matmul (Dense), an einsum over a view of the kernel (EinsumDense), or the params
handed over unapplied (DenseWeights)."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxbert.model.options import constrain_batch

Array = jax.Array


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
