"""Numerical parity with transformers: stage-by-stage diffs of outputs and gradients."""

from jaxbert.parity.compare import TOLERANCE, ParityReport, Row, compare, torch_model
from jaxbert.parity.grad import GradResult, fixed_masking, grad_parity

__all__ = ["TOLERANCE", "GradResult", "ParityReport", "Row", "compare", "fixed_masking", "grad_parity",
           "torch_model"]
