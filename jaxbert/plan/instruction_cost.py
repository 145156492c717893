"""The FLOPs of one HLO instruction: dots, convolutions and cuBLAS GEMMs (``instruction_flops``), and a Pallas
TPU kernel's cost, which XLA counts as unknown (``kernel_cost``: a declared pl.CostEstimate, or splash
attention's grid read from its operands and block sizes). Element-wise and reduction FLOPs are not counted
(the step-time bound, jaxbert.plan.roofline, is a lower bound).
"""

from __future__ import annotations

import math
import re

from jaxbert.plan.hlo_text import SHAPE, dims


_SPLASH = re.compile(r"splash_(?:mha|mqa)_(fwd|dq|dkv)")
# per score element of a visited block: matmuls of head dim D (q k^T and p v forward; the dq kernel recomputes
# q k^T and forms do v^T and ds k; the dkv kernel recomputes q k^T and do v^T and forms p^T do and ds^T q)
_SPLASH_MATMULS = {"fwd": 2, "dq": 3, "dkv": 4}
_SPLASH_BLOCKS = {"fwd": ("block_q", "block_kv"), "dq": ("block_q_dq", "block_kv_dq"),
                  "dkv": ("block_q_dkv", "block_kv_dkv")}


def kernel_cost(shape: str, operands: list[str], rest: str, shape_of) -> tuple[float, float] | None:
    """(FLOPs, bytes) of a Pallas TPU kernel (custom call tpu_custom_call), which XLA counts as unknown (-1).

    A kernel that declares a pl.CostEstimate carries it in its backend config: read. Splash attention
    declares none: its FLOPs are counted from the grid it runs, per head (the kernel's q operand [B.., H, T, D])
    the (query block, key block) steps, read from its block-mask operand [h, rows, columns] (the blocks
    its mask visits) or, with none (a full mask), every pair, at the block sizes of its kernel metadata
    (splash's default 128 where absent). Steps the mask skips at the ends of a row cost no matmul but are
    counted, a few per cent at long T. The head dim is counted at no less than the 128 lanes the MXU
    works in (64 costs the time of 128). Bytes: the bound's operands + result, unless the estimate says more.
    None for any other custom call."""
    if 'custom_call_target="tpu_custom_call"' not in rest:
        return None
    declared = re.search(r'"cost_estimate":\s*\{([^}]*)\}', rest)
    if declared:
        # numbers bare where lowered, quoted once compiled ("flops":"154618822656")
        field = lambda key: re.search(rf'"{key}":\s*"?(\d+)', declared.group(1))
        if field("flops"):
            return float(field("flops").group(1)), float(field("bytes_accessed").group(1) if field("bytes_accessed") else 0)
    phase = _SPLASH.search(rest)
    if not phase:
        return 0.0, 0.0
    phase = phase.group(1)
    arrays = [(SHAPE.search(shape_of(a)) or [None, ""])[1] for a in operands]
    shapes = [dims(shape_of(a)) for a in operands]
    # q [..., H, T, D]: a batch vmapped over the kernel (jaxbert.model.fused calls it per sequence) becomes
    # leading grid dims of the same kernel
    floats = [s for s, t in zip(shapes, arrays) if len(s) >= 3 and t and t[0] in "fb"]
    if len(floats) < 2:
        return 0.0, 0.0
    q, k = floats[0], floats[1]
    # q, k, v go in [.., T, D] or, laid out sequence-minor, [.., D, T]; the kernel's outputs (o, dq, dk, dv)
    # are [.., T, D] either way: a q whose last two dims are an output's reversed is sequence-minor
    outputs = [[int(d) for d in filter(None, m[1].split(","))] for m in SHAPE.findall(shape) if m[0][0] in "fb"]
    seq_minor = (any(o[-2:] == q[-2:][::-1] for o in outputs if len(o) >= 3)
                 and not any(o[-2:] == q[-2:] for o in outputs if len(o) >= 3))
    heads = math.prod(q[:-2])
    (D, Tq), Tk = (q[-2:], k[-1]) if seq_minor else (q[-2:][::-1], k[-2])
    # the MXU contracts and emits at least 128 lanes at a time: a head dim of 64 takes the time of 128
    D = max(D, 128)
    sizes = []
    for key in _SPLASH_BLOCKS[phase]:
        m = re.search(re.escape(key) + r'\\?"\s*:\s*(\d+)', rest)
        sizes.append(int(m.group(1)) if m else 128)
    bq, bkv = sizes
    first = shapes[0] if shapes else []
    grid = (first[1] * first[2] if len(first) == 3 and arrays[0] and arrays[0][0] in "su"
            else max(Tq // bq, 1) * max(Tk // bkv, 1))
    return 2.0 * heads * grid * bq * bkv * D * _SPLASH_MATMULS[phase], 0.0


def instruction_flops(shape: str, op: str, operands: list[str], rest: str, shape_of) -> float:
    """Dots, convolutions and cuBLAS GEMMs: 2 x output elements x contracted elements; else 0."""
    out = math.prod(dims(shape))
    if op == "dot":
        lhs = dims(shape_of(operands[0]))
        m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
        contracted = [lhs[int(i)] for i in m.group(1).split(",") if i] if m else []
        return 2.0 * out * math.prod(contracted)
    if op == "convolution":
        # per output element: the kernel's input features x the window positions that meet real input. TPU
        # writes batched matmuls as convolutions whose batch dims are windows over a dilated input
        # (window size = lhs_dilate): one real position each, not the window's size
        # (window size = lhs_dilate), or pads a size-1 input to slide a window over it: per spatial dim, the
        # positions are the window's over the dilation, at most the input's real extent
        lhs, kernel = dims(shape_of(operands[0])), dims(shape_of(operands[1]))
        m = re.search(r"dim_labels=(\w+)_(\w+)->", rest)
        if not m or len(m.group(2)) != len(kernel) or len(m.group(1)) != len(lhs):
            return 0.0
        lhs_labels, labels = m.groups()
        spatial = sorted(c for c in labels if c.isdigit())
        size = re.search(r"\bsize=([\dx]+)", rest)
        windows = [int(w) for w in size.group(1).split("x")] if size else [kernel[labels.index(c)] for c in spatial]
        dilate = re.search(r"\blhs_dilate=([\dx]+)", rest)
        dilation = [int(d) for d in dilate.group(1).split("x")] if dilate else [1] * len(windows)
        positions = 1
        for c, w, d in zip(spatial, windows, dilation):
            positions *= min(-(-w // max(d, 1)), lhs[lhs_labels.index(c)])
        return 2.0 * out * kernel[labels.index("i")] * positions
    if op == "custom-call" and re.search(r'custom_call_target="__cublas\$(lt\$matmul|gemm)', rest):
        m = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', rest)
        lhs = dims(shape_of(operands[0]))
        contracted = [lhs[int(i)] for i in re.findall(r"\d+", m.group(1))] if m else []
        return 2.0 * out * math.prod(contracted)
    return 0.0
