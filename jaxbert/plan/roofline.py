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
"""

from __future__ import annotations

import dataclasses
import math
import re

ITEM = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
        "s8": 1, "u8": 1, "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 1, "u4": 1}
SHAPE = re.compile(r"\b(" + "|".join(sorted(ITEM, key=len, reverse=True)) + r")\[([0-9,]*)\]")
INSTR = re.compile(r"^(?:ROOT )?%?([\w.\-]+) = (.*?) ([\w\-]+)\((.*?)\)(.*)$")
HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{$")
FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all", "partition-id", "replica-id"}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
SLICES = ("dynamic-slice", "slice", "gather")


def _arrays(shape_text: str) -> list[int]:
    """Bytes of each array in a shape (a tuple shape has several)."""
    out = []
    for dtype, dims in SHAPE.findall(shape_text):
        n = ITEM[dtype]
        for d in filter(None, dims.split(",")):
            n *= int(d)
        out.append(n)
    return out


def nbytes(shape_text: str) -> int:
    return sum(_arrays(shape_text))


_PLACED = re.compile(SHAPE.pattern + r"(\{[^}]*\})?")


def hbm_nbytes(shape_text: str) -> int:
    """Bytes of the arrays of a shape that live in device memory: a TPU layout's S(n), n > 0, places an
    array in on-chip memory (CMEM, VMEM), whose traffic the HBM bandwidth does not bound."""
    total = 0
    for dtype, dims_, layout in _PLACED.findall(shape_text):
        space = re.search(r"S\((\d+)\)", layout or "")
        if space and int(space.group(1)) != 0:
            continue
        n = ITEM[dtype]
        for d in filter(None, dims_.split(",")):
            n *= int(d)
        total += n
    return total


def dims(shape_text: str) -> list[int]:
    """The dims of the first array in a shape."""
    m = SHAPE.search(shape_text)
    return [int(d) for d in filter(None, m.group(2).split(","))] if m else []


def computations(text: str) -> tuple[dict, str]:
    """{computation name: its instruction lines}, and the entry computation's name."""
    comps, entry, cur = {}, None, None
    for line in text.splitlines():
        m = HEADER.match(line)
        if m and not line.startswith(" "):
            cur = m.group(2)
            comps[cur] = []
            entry = cur if m.group(1) else entry
        elif cur and line.startswith("  "):
            comps[cur].append(line.strip())
        elif line.rstrip() == "}":
            cur = None
        elif cur and comps[cur] and line.strip():
            # an attribute printed over several lines (a Pallas kernel's frontend_attributes): the same instruction
            comps[cur][-1] += line.strip()
    return comps, entry


@dataclasses.dataclass
class Op:
    """One executed top-level instruction (times: how often it runs, already applied to the figures)."""
    opcode: str
    source: str  # the op_name of its metadata, "<async copy>" for an asynchronous copy's -done
    flops: float
    bytes: float  # what the bound counts (slices and in-place updates at their size)
    plain_bytes: float  # operands + result, as hlo_bytes.py counts
    collective_bytes: float = 0.0
    times: int = 1


def _constant(instr) -> int | None:
    """The integer of a scalar constant instruction tuple (shape, op, args, rest), else None."""
    _, op, args, _ = instr
    return int(args[0]) if op == "constant" and args and re.fullmatch(r"-?\d+", args[0]) else None


class _Comp:
    """One computation's parsed instructions: name -> (shape, opcode, operands, rest)."""

    def __init__(self, lines: list[str]):
        self.instrs = {}
        self.root = None
        self.params = {}  # parameter index -> name
        for line in lines:
            m = INSTR.match(line)
            if not m:
                continue
            name, shape, op, args, rest = m.groups()
            operands = [re.sub(r"/\*.*?\*/", "", a).strip().lstrip("%") for a in args.split(",") if a.strip()]
            self.instrs[name] = (shape, op, operands, rest)
            if line.startswith("ROOT "):
                self.root = name
            if op == "parameter":
                self.params[int(args)] = name
        self.users = {}
        for name, (_, _, operands, _) in self.instrs.items():
            for i, a in enumerate(operands):
                self.users.setdefault(a, []).append((name, i))

    def size(self, name: str) -> int:
        return nbytes(self.instrs[name][0]) if name in self.instrs else 0

    def hbm(self, name: str) -> int:
        return hbm_nbytes(self.instrs[name][0]) if name in self.instrs else 0

    def shape(self, name: str) -> str:
        return self.instrs[name][0] if name in self.instrs else ""


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
        field = lambda key: re.search(rf'"{key}":\s*(\d+)', declared.group(1))
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


class HloModule:
    """The optimized HLO text of one compiled program, parsed once."""

    def __init__(self, text: str):
        raw, self.entry = computations(text)
        self.comps = {name: _Comp(lines) for name, lines in raw.items()}
        self._flops_cache: dict[str, float] = {}

    def trip_count(self, while_rest: str, comp_of_while: "_Comp | None" = None, init_operand: str | None = None) -> int:
        """A while loop's trip count: XLA's known_trip_count where the backend writes it (CPU, GPU), else read
        from its condition (TPU): `counter < N` (or <= N - 1) on a tuple element, counting from 0 by 1, as
        jax's scans and fori_loops do; the step from the body's update of the counter, the start from the
        loop's init tuple where it is a constant. 1 if neither says."""
        known = re.search(r'"known_trip_count":\{"n":"(\d+)"', while_rest)
        if known:
            return int(known.group(1))
        cond = re.search(r"condition=%?([\w.\-]+)", while_rest)
        comp = self.comps.get(cond.group(1)) if cond else None
        if comp is None or comp.root is None:
            return 1
        shape, op, operands, rest = comp.instrs[comp.root]
        direction = re.search(r"direction=(\w+)", rest)
        if op != "compare" or not direction or len(operands) != 2:
            return 1
        counter, bound = (comp.instrs.get(a, ("", "", [], "")) for a in operands)
        index = re.search(r"\bindex=(\d+)", counter[3])
        if counter[1] != "get-tuple-element" or not index or _constant(bound) is None:
            return 1
        n, k = _constant(bound), int(index.group(1))
        span = {"LT": n, "LE": n + 1}.get(direction.group(1))
        if span is None:
            return 1
        # the counter's step: the body's root tuple element k = counter + constant (XLA unrolls windowed
        # einsum loops by 2: `i < 4` with `i += 2` is 2 trips); its start: the init tuple's element k
        step = start = None
        body = self.comps.get((re.search(r"body=%?([\w.\-]+)", while_rest) or [None, ""])[1])
        if body is not None and body.root is not None and body.instrs[body.root][1] == "tuple":
            element = body.instrs.get(body.instrs[body.root][2][k], ("", "", [], ""))
            if element[1] == "add":
                step = next((v for v in map(_constant, (body.instrs.get(a, ("", "", [], ""))
                                                         for a in element[2])) if v is not None), None)
        init = comp_of_while.instrs.get(init_operand, ("", "", [], "")) if comp_of_while and init_operand else None
        if init is not None and init[1] == "tuple" and k < len(init[2]):
            start = _constant(comp_of_while.instrs.get(init[2][k], ("", "", [], "")))
        step, start = step or 1, start or 0
        return max(-(-(span - start) // step), 1) if step > 0 else 1

    def computation_flops(self, name: str) -> float:
        """Dots and convolutions of a called computation, its own callees included."""
        if name not in self._flops_cache:
            self._flops_cache[name] = 0.0  # a cycle guard
            comp = self.comps.get(name)
            total = 0.0
            if comp is not None:
                for iname, (shape, op, operands, rest) in comp.instrs.items():
                    total += instruction_flops(shape, op, operands, rest, comp.shape)
                    for callee in re.findall(r"(?:calls|to_apply)=%?([\w.\-]+)", rest):
                        if op not in ("reduce", "reduce-window", "scatter", "sort", "map", "select-and-scatter",
                                      "all-reduce", "reduce-scatter", "all-reduce-start"):
                            total += self.computation_flops(callee)
            self._flops_cache[name] = total
        return self._flops_cache[name]

    def computation_collectives(self, name: str, depth: int = 0) -> float:
        """Collective bytes of the collectives inside a fusion computation (nested fusions included)."""
        comp = self.comps.get(name)
        total = 0.0
        for iname, (shape, op, operands, rest) in (comp.instrs.items() if comp and depth < 8 else ()):
            if op.removesuffix("-start") in COLLECTIVES:
                total += max([sum(comp.size(a) for a in operands)] + _arrays(shape))
            elif op == "fusion":
                callee = re.search(r"calls=%?([\w.\-]+)", rest)
                total += self.computation_collectives(callee.group(1), depth + 1) if callee else 0.0
        return total

    def _fusion_bytes(self, callee: str, operand_sizes: list[int], result_size: int) -> float:
        """Operand + result bytes of a fusion, slices of an operand at their size, in-place updates at theirs."""
        comp = self.comps.get(callee)
        if comp is None:
            return sum(operand_sizes) + result_size
        in_place = set()
        root_shape, root_op, root_operands, _ = comp.instrs.get(comp.root, ("", "", [], ""))
        roots = root_operands if root_op == "tuple" else [comp.root]
        for r in roots:
            shape, op, operands, _ = comp.instrs.get(r, ("", "", [], ""))
            if op == "dynamic-update-slice":
                base = self._through_bitcasts(comp, operands[0])
                if comp.instrs.get(base, ("", ""))[1] == "parameter":
                    in_place.add(base)
                    result_size += comp.size(operands[1]) - nbytes(shape)  # writes the update, not the buffer
        total = max(result_size, 0)
        for i, size in enumerate(operand_sizes):
            p = comp.params.get(i)
            if p is None:
                total += size
            elif p in in_place:
                continue
            else:
                sliced = self._sliced_bytes(comp, p)
                total += size if sliced is None else min(size, sliced)
        return total

    @staticmethod
    def _through_bitcasts(comp: _Comp, name: str) -> str:
        while comp.instrs.get(name, ("", ""))[1] == "bitcast":
            name = comp.instrs[name][2][0]
        return name

    def _sliced_bytes(self, comp: _Comp, name: str, depth: int = 0) -> int | None:
        """Bytes read of `name` when every reader (past bitcasts) only slices it; None otherwise."""
        total = 0
        for user, pos in comp.users.get(name, []):
            op = comp.instrs[user][1]
            if op == "bitcast" and depth < 8:
                inner = self._sliced_bytes(comp, user, depth + 1)
                if inner is None:
                    return None
                total += inner
            elif op in SLICES and pos == 0:
                total += comp.size(user)
            elif op == "fusion" and depth < 8:  # a nested fusion that only slices its operand
                callee = re.search(r"calls=%?([\w.\-]+)", comp.instrs[user][3])
                inner = self.comps.get(callee.group(1)) if callee else None
                sliced = None if inner is None or pos not in inner.params else self._sliced_bytes(
                    inner, inner.params[pos], depth + 1)
                if sliced is None:
                    return None
                total += sliced
            else:
                return None
        return total if comp.users.get(name) else None

    def callees(self, rest: str) -> list[str]:
        """The computations a call or conditional runs, each time it runs: a call's callee; of a conditional's
        branches (which one runs is data), the costliest (most FLOPs, then most bytes), so a layer that
        chooses its attention kernel by data is counted at its dearer kernel, not at whichever branch is
        listed first."""
        branches = re.search(r"branch_computations=\{([^}]*)\}", rest)
        if branches is None:
            names = re.findall(r"(?:to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)", rest)
            names = [n for n in names if n in self.comps]
            if len(names) < 2 or "true_computation" not in rest:
                return names
        else:
            names = [n.strip().lstrip("%") for n in branches.group(1).split(",")]
            names = [n for n in names if n in self.comps]
        cost = lambda n: (sum(op.flops for op in self.operations(n)), sum(op.bytes for op in self.operations(n)))
        return [max(names, key=cost)] if names else []

    def operations(self, name: str | None = None, times: int = 1):
        """An Op per executed instruction of computation `name` (the entry by default)."""
        comp = self.comps[name or self.entry]
        for iname, (shape, op, operands, rest) in comp.instrs.items():
            if op in FREE:
                continue
            if op == "while":
                body = re.search(r"body=%?([\w.\-]+)", rest).group(1)
                yield from self.operations(body, times * self.trip_count(rest, comp, operands[0] if operands else None))
                continue
            if op in ("call", "conditional"):
                for callee in self.callees(rest):
                    yield from self.operations(callee, times)
                continue
            base = op.removesuffix("-start").removesuffix("-done")
            source = re.search(r'op_name="([^"]*)"', rest)
            source = source.group(1) if source else ""
            size = nbytes(shape)
            if base in COLLECTIVES:
                if op.endswith("-done"):
                    continue
                operand_bytes = sum(comp.size(a) for a in operands)
                moved = max([operand_bytes] + _arrays(shape))
                plain = 0 if op.endswith("-start") else size + operand_bytes
                yield Op(op, source, 0.0, 0.0, plain * times, moved * times, times)
                continue
            if op.endswith("-start"):
                continue
            if op.endswith("-done"):  # an asynchronous copy or slice: hlo_bytes counts it read and written;
                # between device memory and on-chip memory, it moves through HBM once
                yield Op(op, "<async copy>", 0.0, size * times, 2 * size * times, 0.0, times)
                continue
            plain = size + sum(comp.size(a) for a in operands)
            # the bound counts device-memory (HBM) traffic only: arrays placed on chip (S(n)) move for free
            operand_sizes, result_size = [comp.hbm(a) for a in operands], hbm_nbytes(shape)
            flops = instruction_flops(shape, op, operands, rest, comp.shape)
            moved = result_size + sum(operand_sizes)
            coll = 0.0
            if op == "fusion":
                callee = re.search(r"calls=%?([\w.\-]+)", rest)
                if callee:
                    flops += self.computation_flops(callee.group(1))
                    moved = self._fusion_bytes(callee.group(1), operand_sizes, result_size)
                    coll = self.computation_collectives(callee.group(1))
            elif op in ("dynamic-slice", "slice"):
                moved = result_size + (size if operand_sizes and operand_sizes[0] else 0)
            elif op == "dynamic-update-slice" and len(operand_sizes) > 1:
                moved = 2 * operand_sizes[1]
            elif op == "custom-call":
                for callee in re.findall(r"called_computations=\{%?([\w.\-]+)", rest):
                    flops += self.computation_flops(callee)
                kernel = kernel_cost(shape, operands, rest, comp.shape)
                if kernel is not None:
                    flops += kernel[0]
                    moved = max(moved, kernel[1])
            if coll:  # libtpu fuses collectives (an all-gather feeding a matmul): both terms count
                yield Op(op, source, 0.0, 0.0, 0.0, coll * times, times)
            yield Op(op, source, flops * times, moved * times, plain * times, 0.0, times)


def kernel_flops(hlo) -> tuple[int, float]:
    """(how many Pallas TPU kernel calls a step runs, their FLOPs as kernel_cost counts them): what XLA's
    cost_analysis leaves out (it counts each such custom call as -1 FLOPs). Takes an HloModule or the HLO text."""
    module = hlo if isinstance(hlo, HloModule) else HloModule(hlo)
    calls, flops = 0, 0.0

    def walk(name, times):
        nonlocal calls, flops
        comp = module.comps[name]
        for iname, (shape, op, operands, rest) in comp.instrs.items():
            if op == "while":
                body = re.search(r"body=%?([\w.\-]+)", rest).group(1)
                walk(body, times * module.trip_count(rest, comp, operands[0] if operands else None))
            elif op in ("call", "conditional"):
                for callee in module.callees(rest):
                    walk(callee, times)
            elif op == "custom-call":
                cost = kernel_cost(shape, operands, rest, comp.shape)
                if cost is not None:
                    calls, flops = calls + times, flops + cost[0] * times
    walk(module.entry, 1)
    return calls, flops


def instructions(comps_or_module, name: str | None = None, times: int = 1):
    """(bytes, opcode, source op_name) per executed instruction, operands + result as hlo_bytes.py counts
    (collectives' -start and every -done as hlo_bytes always did). Takes an HloModule or the HLO text."""
    module = comps_or_module if isinstance(comps_or_module, HloModule) else HloModule(comps_or_module)
    for op in module.operations(name, times):
        if op.plain_bytes:
            yield op.plain_bytes, op.opcode, op.source
    # collective -done instructions: hlo_bytes counted them as asynchronous copies
    yield from _collective_dones(module, name or module.entry, times)


def _collective_dones(module: HloModule, name: str, times: int):
    comp = module.comps[name]
    for iname, (shape, op, operands, rest) in comp.instrs.items():
        if op == "while":
            body = re.search(r"body=%?([\w.\-]+)", rest).group(1)
            yield from _collective_dones(module, body, times * module.trip_count(rest, comp, operands[0] if operands else None))
        elif op in ("call", "conditional"):
            for callee in module.callees(rest):
                yield from _collective_dones(module, callee, times)
        elif op.endswith("-done") and op.removesuffix("-done") in COLLECTIVES:
            yield 2 * nbytes(shape) * times, op, "<async copy>"


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
