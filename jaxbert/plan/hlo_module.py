"""A compiled program's HLO parsed once (``HloModule``) and walked as it executes: an ``Op`` per executed
top-level instruction of the entry computation (a while body's times its trip count; calls and conditionals
through their callees), with its FLOPs, the bytes the step-time bound counts (jaxbert.plan.roofline: slices
and in-place updates at their size, on-chip arrays left out), the plain operand + result bytes
``benchmarks/hlo_bytes.py`` counts, and its collective bytes.
"""

from __future__ import annotations

import dataclasses
import re

from jaxbert.plan.hlo_text import Computation, array_sizes, computations, hbm_nbytes, int_constant, nbytes
from jaxbert.plan.instruction_cost import instruction_flops, kernel_cost

FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all", "partition-id", "replica-id"}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
SLICES = ("dynamic-slice", "slice", "gather")


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


class HloModule:
    """The optimized HLO text of one compiled program, parsed once."""

    def __init__(self, text: str):
        raw, self.entry = computations(text)
        self.comps = {name: Computation(lines) for name, lines in raw.items()}
        self._flops_cache: dict[str, float] = {}

    def trip_count(self, while_rest: str, comp_of_while: "Computation | None" = None, init_operand: str | None = None) -> int:
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
        if counter[1] != "get-tuple-element" or not index or int_constant(bound) is None:
            return 1
        n, k = int_constant(bound), int(index.group(1))
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
                step = next((v for v in map(int_constant, (body.instrs.get(a, ("", "", [], ""))
                                                         for a in element[2])) if v is not None), None)
        init = comp_of_while.instrs.get(init_operand, ("", "", [], "")) if comp_of_while and init_operand else None
        if init is not None and init[1] == "tuple" and k < len(init[2]):
            start = int_constant(comp_of_while.instrs.get(init[2][k], ("", "", [], "")))
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
                total += max([sum(comp.size(a) for a in operands)] + array_sizes(shape))
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
    def _through_bitcasts(comp: Computation, name: str) -> str:
        while comp.instrs.get(name, ("", ""))[1] == "bitcast":
            name = comp.instrs[name][2][0]
        return name

    def _sliced_bytes(self, comp: Computation, name: str, depth: int = 0) -> int | None:
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
                moved = max([operand_bytes] + array_sizes(shape))
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
