"""Numerical parity with transformers: stage-by-stage diffs of outputs and gradients,
a float64 reference, and training trajectories."""

from jaxbert.parity.compare import compare, numerics, torch_model
from jaxbert.parity.grad import fixed_masking, grad_parity
from jaxbert.parity.report import GRAD_TOLERANCE, RATIO_LIMIT, TOLERANCE, GradResult, ParityReport, Row

__all__ = ["GRAD_TOLERANCE", "RATIO_LIMIT", "TOLERANCE", "GradResult", "ParityReport", "Row", "compare",
           "fixed_masking", "grad_parity", "numerics", "torch_model"]
