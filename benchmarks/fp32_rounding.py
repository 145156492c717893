"""How far each float32 building block lands from float64, in JAX (XLA CPU) and in
PyTorch, on the same inputs: the rms of (float32 result - float64 result).

Behind README's Numerics note on `jaxbert parity --reference float64`:
    python benchmarks/fp32_rounding.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

jax.config.update("jax_enable_x64", True)


def _rms(a, truth) -> float:
    return float(np.sqrt(np.mean((np.asarray(a, np.float64) - truth) ** 2)))


def main() -> None:
    from jaxbert.model.activations import gelu_exact

    rng = np.random.default_rng(0)
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    t32 = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    rows = []

    a, b = rng.normal(size=(256, 384)), rng.normal(size=(384, 1536)) * 0.05
    with jax.default_matmul_precision("highest"):
        jax_mm = jax.jit(jnp.dot)(f32(a), f32(b))
    rows.append(("matmul 256x384 @ 384x1536", a @ b, jax_mm, (t32(a) @ t32(b)).numpy(),
                 a.astype(np.float32) @ b.astype(np.float32)))

    x = rng.normal(size=(2000, 384)) * 3
    ln = lambda t: torch.nn.functional.layer_norm(t, (384,), eps=1e-12)  # noqa: E731

    def jax_ln(v):  # the two-pass form flax's LayerNorm(use_fast_variance=False) uses
        d = v - v.mean(-1, keepdims=True)
        return d * jax.lax.rsqrt((d * d).mean(-1, keepdims=True) + 1e-12)
    rows.append(("layer norm over 384", ln(torch.tensor(x)).numpy(), jax.jit(jax_ln)(f32(x)), ln(t32(x)).numpy(), None))

    s = rng.normal(size=(2000, 64)) * 4
    rows.append(("softmax over 64", torch.softmax(torch.tensor(s), -1).numpy(), jax.jit(jax.nn.softmax)(f32(s)),
                 torch.softmax(t32(s), -1).numpy(), None))

    g = rng.normal(size=(2000, 1536)) * 2
    gelu = torch.nn.functional.gelu
    rows.append(("gelu (erf)", gelu(torch.tensor(g)).numpy(), jax.jit(gelu_exact)(f32(g)), gelu(t32(g)).numpy(), None))
    rows.append(("tanh", np.tanh(g), jax.jit(jnp.tanh)(f32(g)), torch.tanh(t32(g)).numpy(), None))

    print(f"jax {jax.__version__}, torch {torch.__version__}, numpy {np.__version__}; "
          f"device {jax.devices()[0].device_kind}")
    print(f"{'op':<28}{'jax fp32':>12}{'torch fp32':>12}{'numpy fp32':>12}{'jax/torch':>11}")
    for name, truth, j, t, n in rows:
        rj, rt = _rms(j, truth), _rms(t, truth)
        rn = f"{_rms(n, truth):12.3e}" if n is not None else f"{'':>12}"
        print(f"{name:<28}{rj:12.3e}{rt:12.3e}{rn}{rj / rt:11.2f}")


if __name__ == "__main__":
    main()
