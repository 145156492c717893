"""Activation functions by transformers' ``hidden_act`` names."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxbert.model.hf_config import ACTIVATIONS  # noqa: F401 (the names; ACT_FNS has a function for each)

Array = jax.Array


def _gelu_tanh(x):
    return jax.nn.gelu(x, approximate=True)


_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


@jax.custom_vjp
def gelu_exact(x: Array) -> Array:
    """x * Phi(x) with the erf form of Phi, as jax.nn.gelu(approximate=False).

    Its backward reuses Phi(x) from the forward pass, where plain autodiff would
    evaluate erf a second time.
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
