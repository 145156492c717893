"""Optimized HLO text (``compiled.as_text()``) read into computations and instructions, and the bytes of
its shapes: what the step-time bound (jaxbert.plan.roofline) and ``benchmarks/hlo_bytes.py`` count from.

An instruction is (shape, opcode, operands, rest of the line); a shape's bytes are its arrays' elements
times their dtype's size (``nbytes``), or only those a TPU layout leaves in device memory (``hbm_nbytes``).
"""

from __future__ import annotations

import re

ITEM = {"f64": 8, "s64": 8, "u64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
        "s8": 1, "u8": 1, "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 1, "u4": 1}
SHAPE = re.compile(r"\b(" + "|".join(sorted(ITEM, key=len, reverse=True)) + r")\[([0-9,]*)\]")
INSTR = re.compile(r"^(?:ROOT )?%?([\w.\-]+) = (.*?) ([\w\-]+)\((.*?)\)(.*)$")
HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{$")


def array_sizes(shape_text: str) -> list[int]:
    """Bytes of each array in a shape (a tuple shape has several)."""
    out = []
    for dtype, dims in SHAPE.findall(shape_text):
        n = ITEM[dtype]
        for d in filter(None, dims.split(",")):
            n *= int(d)
        out.append(n)
    return out


def nbytes(shape_text: str) -> int:
    return sum(array_sizes(shape_text))


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


def int_constant(instr) -> int | None:
    """The integer of a scalar constant instruction tuple (shape, op, args, rest), else None."""
    _, op, args, _ = instr
    return int(args[0]) if op == "constant" and args and re.fullmatch(r"-?\d+", args[0]) else None


class Computation:
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
