"""What a parity check returns: rows per stage, gradient results, the report header, JSON."""

from __future__ import annotations

import dataclasses
import json

import flax
import jax

from jaxbert.fs import atomic_write_text

# Default tolerances on max abs diff. Hidden states are LayerNorm outputs
# (order 1); logits rows scale theirs by max(1, max |reference|).
TOLERANCE = {"float64": 1e-10, "float32": 1e-5, "bfloat16": 0.15}
# Gradients: worst per-tensor relative error (see grad.grad_parity).
GRAD_TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "bfloat16": 1e-1}
# --reference float64: jaxbert's rms distance from the float64 truth may exceed its own float32
# rounding on the same inputs (its float32 result against its float64 one, on this backend) by at
# most this factor, at every stage. What the backend's arithmetic does is budgeted, whatever
# backend it is; what the implementation does (a wrong constant, a weight off by 1e-5) is not.
RATIO_LIMIT = 1.25


@dataclasses.dataclass
class Row:
    stage: str
    max_abs: float  # |jaxbert - transformers| at the same dtype
    mean_abs: float
    max_rel: float
    tolerance: float
    # --reference float64 only: max |jaxbert - torch fp64| and max |torch - torch fp64|,
    # the root mean squares of the same differences, and the budget: the rms of jaxbert's own
    # float32 result against its float64 one (this backend's float32 rounding on these inputs).
    jax_vs_truth: float | None = None
    torch_vs_truth: float | None = None
    jax_vs_truth_rms: float | None = None
    torch_vs_truth_rms: float | None = None
    rounding_rms: float | None = None

    @property
    def ratio(self) -> float | None:
        """jaxbert's rms distance from the float64 truth over its own float32 rounding: about 1 when
        the implementation is right (its float64 result is the truth), more by what it adds. The rms,
        not the max: a max over thousands of rounding errors is one draw from the tail."""
        if self.jax_vs_truth_rms is None or self.rounding_rms is None:
            return None
        if self.rounding_rms == 0.0:
            return 1.0 if self.jax_vs_truth_rms == 0.0 else float("inf")
        return self.jax_vs_truth_rms / self.rounding_rms

    @property
    def closer(self) -> str | None:
        """Which float32 side is nearer the truth (information: the verdict is the ratio)."""
        if self.jax_vs_truth_rms is None:
            return None
        a, b = self.jax_vs_truth_rms, self.torch_vs_truth_rms
        return "tie" if a == b else ("jaxbert" if a < b else "torch")

    @property
    def ok(self) -> bool:
        within = self.max_abs <= self.tolerance
        return bool(within and (self.ratio is None or self.ratio <= RATIO_LIMIT))


@dataclasses.dataclass
class GradResult:
    worst_rel: float  # max |g_jax - g_torch| / max |g_torch| over the worst tensor
    worst_param: str  # transformers state-dict key of that tensor
    worst_index: tuple
    loss_jax: float
    loss_torch: float
    tolerance: float = 1e-4

    @property
    def ok(self) -> bool:
        return bool(self.worst_rel <= self.tolerance)


def environment(dtype: str, precision: str, reference: str) -> dict:
    """Versions, device and numeric settings a report was taken under."""

    env = {"jax": jax.__version__, "flax": flax.__version__}
    for mod in ("torch", "transformers"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    device = jax.devices()[0]
    env.update(device=f"{device.platform}: {device.device_kind}", dtype=dtype, precision=precision,
               reference=reference)
    return env


@dataclasses.dataclass
class ParityReport:
    model_class: str
    dtype: str
    rows: list
    argmax_agree: bool | None = None  # MLM argmax equal at every real token
    grad: GradResult | None = None
    env: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and (self.grad is None or self.grad.ok)

    @property
    def has_truth(self) -> bool:
        return any(r.jax_vs_truth is not None for r in self.rows)

    def row(self, stage: str) -> Row:
        return next(r for r in self.rows if r.stage == stage)

    def header(self) -> str:
        e = self.env
        versions = ", ".join(f"{k} {e[k]}" for k in ("jax", "flax", "torch", "transformers") if e.get(k))
        return (f"{versions}\ndevice {e.get('device')}; dtype {e.get('dtype', self.dtype)}; "
                f"matmul precision {e.get('precision')}; reference {e.get('reference')}")

    def table(self) -> str:
        truth = self.has_truth
        ref_dtype = "float64" if self.dtype == "float64" else "float32"
        lines = [self.header() if self.env else "",
                 f"{self.model_class}, jaxbert {self.dtype} vs transformers {ref_dtype} (real tokens only)"]
        head = f"{'stage':<16}{'max abs':>12}{'mean abs':>12}{'max rel':>12}{'tolerance':>12}"
        if truth:
            head += f"{'jax-fp64':>12}{'torch-fp64':>12}{'fp32 budget':>12}{'excess':>8}  {'closer':<8}"
        lines.append(head + "  ok")
        for r in self.rows:
            line = (f"{r.stage:<16}{r.max_abs:12.3e}{r.mean_abs:12.3e}{r.max_rel:12.3e}"
                    f"{r.tolerance:12.1e}")
            if truth:
                line += (f"{r.jax_vs_truth:12.3e}{r.torch_vs_truth:12.3e}{r.rounding_rms:12.3e}{r.ratio:8.2f}"
                         f"  {r.closer:<8}")
            lines.append(line + f"  {'yes' if r.ok else 'NO'}")
        if truth:
            lines.append(f"jax-fp64 = max |jaxbert {self.dtype} - torch float64|, torch-fp64 = max |torch "
                         f"{self.dtype} - torch float64|; fp32 budget = rms |jaxbert float32 - jaxbert float64|, "
                         f"this backend's own float32 rounding on these inputs; excess = rms |jaxbert "
                         f"{self.dtype} - torch float64| / fp32 budget, at most {RATIO_LIMIT}")
        if self.argmax_agree is not None:
            lines.append(f"MLM argmax agrees at every real token: {'yes' if self.argmax_agree else 'NO'}")
        if self.grad is not None:
            g = self.grad
            lines.append(f"gradients: worst relative error {g.worst_rel:.3e} at {g.worst_param}{list(g.worst_index)}"
                         f" (loss {g.loss_jax:.10g} vs {g.loss_torch:.10g}; tolerance {g.tolerance:.0e})"
                         f"  {'yes' if g.ok else 'NO'}")
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(line for line in lines if line)

    def to_json(self) -> dict:
        out = {"model_class": self.model_class, "dtype": self.dtype, "ok": self.ok,
               "argmax_agree": self.argmax_agree, "env": self.env,
               "rows": [dict(dataclasses.asdict(r), ratio=r.ratio, closer=r.closer, ok=r.ok)
                        for r in self.rows]}
        if self.grad is not None:
            out["grad"] = dict(dataclasses.asdict(self.grad), ok=self.grad.ok)
        return out

    def write_json(self, path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2))
