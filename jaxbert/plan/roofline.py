"""A lower bound on a compiled step's time, read from its optimized HLO text (``compiled.as_text()``).

Each executed top-level instruction of the entry computation (a while body's instructions times its
trip count; calls and conditionals through their callees) is one operation with

- FLOPs: its dots and convolutions, those inside its fusion computations included: 2 x the product of
  the output dims x the product of the contracted dims (a convolution: its kernel's input features x
  the window positions that meet real input). cuBLAS GEMM custom-calls count as dots. Element-wise and reduction FLOPs are NOT
  counted (a lower bound may leave work out; on every accelerator here they ride the vector units
  while the memory term bounds them).
- bytes: its operands + its result, as ``benchmarks/hlo_bytes.py`` counts them (``plain_bytes``),
  except that the bound counts what must move through device memory (``bytes``): an operand a fusion
  only slices is the slice, a dynamic-update-slice done in place reads and writes its update only, an
  asynchronous memory-space copy moves its buffer once, and an array a TPU layout places on chip
  (``S(n)``, n > 0: CMEM, VMEM) is not HBM traffic. Without that, a scanned step's per-layer slice of the
  stacked parameters would count the whole stack on every iteration.
- collective bytes: an all-reduce, all-gather, reduce-scatter, all-to-all or collective-permute
  (or its -start), the larger of its operands and its largest result array.

``step_bound`` = sum over operations of max(FLOPs / peak FLOP/s, bytes / memory bandwidth)
+ collective bytes / interconnect bandwidth. It assumes the step's operations never overlap one
another but that each overlaps its own compute and memory traffic perfectly, at the device's peak:
no step of that HLO runs faster, except by overlapping collectives with compute (``overlapped_s``,
the bound then, is also reported).

The HLO text is read by ``jaxbert.plan.hlo_text``, walked as it executes by ``jaxbert.plan.hlo_module``
(``HloModule.operations``: the ``Op`` per instruction this sums), each instruction's FLOPs counted by
``jaxbert.plan.instruction_cost``.
"""

from __future__ import annotations

import dataclasses

from jaxbert.plan.hlo_module import HloModule


@dataclasses.dataclass
class Bound:
    """The step-time lower bound of one compiled step on one device, and what it is made of."""
    seconds: float  # sum of max(compute, memory) per operation + collectives
    compute_s: float  # sum of FLOPs / peak (every operation compute-bound)
    memory_s: float  # sum of bytes / bandwidth (every operation memory-bound)
    collective_s: float
    flops: float
    bytes: float
    collective_bytes: float
    peak_flops: float
    memory_bandwidth: float
    interconnect_bandwidth: float | None
    memory_bound_share: float  # of the bound's non-collective time, the operations bound by memory

    @property
    def overlapped_s(self) -> float:
        """The bound if collectives overlapped compute entirely."""
        return max(self.seconds - self.collective_s, self.collective_s)

    def mfu_ceiling(self, model_flops: float) -> float:
        """The most MFU a step of model_flops can reach: model FLOPs / (bound x peak)."""
        return model_flops / (self.seconds * self.peak_flops)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def step_bound(hlo, peak_flops: float, memory_bandwidth: float,
               interconnect_bandwidth: float | None = None) -> Bound:
    """The roofline lower bound of a step from its optimized HLO text (or an HloModule): figures per device.

    Collective bytes over interconnect_bandwidth (bytes/s); with None, collectives add nothing."""
    module = hlo if isinstance(hlo, HloModule) else HloModule(hlo)
    total = compute = memory = membound = 0.0
    flops = nbytes_ = coll = 0.0
    for op in module.operations():
        if op.collective_bytes:
            coll += op.collective_bytes
            continue
        c, m = op.flops / peak_flops, op.bytes / memory_bandwidth
        total += max(c, m)
        membound += m if m > c else 0.0
        compute, memory = compute + c, memory + m
        flops, nbytes_ = flops + op.flops, nbytes_ + op.bytes
    coll_s = coll / interconnect_bandwidth if interconnect_bandwidth else 0.0
    return Bound(total + coll_s, compute, memory, coll_s, flops, nbytes_, coll, peak_flops, memory_bandwidth,
                 interconnect_bandwidth, membound / total if total else 0.0)
