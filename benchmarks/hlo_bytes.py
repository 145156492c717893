"""Where a compiled train step's bytes go: operand + result bytes of each top-level HLO instruction.

Reads the optimized HLO text that `jaxbert.plan.compile_step.compile_train_step(..., hlo_dir=D)` (or
`jaxbert.bench.flax_port.compile_old_port_step(..., hlo_dir=D)`) writes to D/train_step.hlo.txt and
groups the bytes each instruction of the entry computation (and of while bodies, times their trip
count) reads and writes by what it came from: the encoder layers (forward / backward), the
embeddings, the MLM head and loss, the rest (optimizer, norms, RNG), the collectives, and what XLA
inserted itself (asynchronous memory-space copies, parameter concatenations). The sum lands near
XLA's own `bytes accessed`; it is a reading aid for comparing two steps, not XLA's cost model.

  python benchmarks/hlo_bytes.py A/train_step.hlo.txt [B/train_step.hlo.txt] [--layer 5] [--top 20]
                                 [--memory-space]
"""

from __future__ import annotations

import argparse
import collections
import re

# The HLO parser is the library's (jaxbert.plan.hlo_text and hlo_module; jaxbert.plan.roofline bounds the
# step's time from it).
from jaxbert.plan.hlo_module import HloModule, instructions
from jaxbert.plan.hlo_text import INSTR, computations, nbytes


def category(op: str, source: str) -> str:
    if source == "<async copy>":
        return "XLA: async memory-space copies"
    if op.startswith(("all-reduce", "reduce-scatter", "all-gather", "collective")):
        return "collectives"
    if not source:
        return "XLA: parameter concatenations" if op == "custom-call" else f"XLA: {op}"
    backward = "transpose(" in source
    if "/encoder/" in source:
        return ("backward" if backward else "forward") + " encoder layers"
    if "/embeddings/" in source:
        return "embeddings"
    if "/cls/" in source or "take_along_axis" in source or "log_softmax" in source or "softmax_cross" in source:
        return "MLM head + loss"
    return "rest: optimizer, norms, RNG"


def summary(path: str, layer: int | None):
    module = HloModule(open(path).read())
    by = collections.Counter()
    in_layer = collections.Counter()
    pattern = None if layer is None else re.compile(rf"(layer\.apply_layer|layer)/{layer}/")
    for b, op, source in instructions(module):
        by[category(op, source)] += b
        if pattern is not None and pattern.search(source):
            in_layer[re.sub(r".*?/(attention/self|attention/output|intermediate|output)/", r"\1/",
                            source)[:70] + (" (bwd)" if "transpose(" in source else "")] += b
    return by, in_layer


def memory_space_consumers(path: str) -> collections.Counter:
    """XLA's own traffic in the entry computation (async copy/slice -done, ConcatBitcast), in bytes, by the
    source op of the first instruction that reads it past further copies, slices and concatenations."""
    comps, entry = computations(open(path).read())
    parsed = [m.groups() for m in map(INSTR.match, comps[entry]) if m]
    size = {name: nbytes(shape) for name, shape, *_ in parsed}
    readers = collections.defaultdict(list)
    for name, _, op, args, rest in parsed:
        for operand in re.findall(r"%?([\w.\-]+)", args):
            readers[operand].append((name, op, rest))

    def is_memory_space(op, rest):
        return op.endswith(("-start", "-done")) or op in ("bitcast", "get-tuple-element") or (
            op == "custom-call" and "ConcatBitcast" in rest)

    def consumer(name, depth=0):
        for reader, op, rest in readers.get(name, []):
            if is_memory_space(op, rest) and depth < 8:
                found = consumer(reader, depth + 1)
                if found:
                    return found
            elif not is_memory_space(op, rest):
                source = re.search(r'op_name="([^"]*)"', rest)
                return re.sub(r"/\d+/", "/N/", source.group(1)) if source else f"<{op}>"
        return None

    by = collections.Counter()
    for name, _, op, _, rest in parsed:
        if op.endswith("-done") or (op == "custom-call" and "ConcatBitcast" in rest):
            by[consumer(name) or "<no reader>"] += 2 * size[name]  # written there, read back
    return by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hlo", nargs="+", help="train_step.hlo.txt files (one column each)")
    ap.add_argument("--layer", type=int, default=None, help="also split this encoder layer's bytes by op")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--memory-space", action="store_true",
                    help="also attribute XLA's memory-space traffic to the source op that reads it")
    args = ap.parse_args()
    results = [summary(p, args.layer) for p in args.hlo]
    keys = sorted({k for by, _ in results for k in by}, key=lambda k: -max(by[k] for by, _ in results))
    print("| bytes (GB) | " + " | ".join(args.hlo) + " |")
    print("|---|" + "---|" * len(args.hlo))
    for k in keys:
        if max(by[k] for by, _ in results) < 5e6:
            continue
        print(f"| {k} | " + " | ".join(f"{by[k] / 1e9:.2f}" for by, _ in results) + " |")
    print("| total | " + " | ".join(f"{sum(by.values()) / 1e9:.2f}" for by, _ in results) + " |")
    if args.layer is not None:
        for path, (_, in_layer) in zip(args.hlo, results):
            print(f"\nlayer {args.layer} of {path}: {sum(in_layer.values()) / 1e9:.3f} GB")
            for k, v in in_layer.most_common(args.top):
                print(f"  {v / 1e6:8.1f} MB  {k}")
    if args.memory_space:
        for path in args.hlo:
            by = memory_space_consumers(path)
            print(f"\nmemory-space traffic of {path} by reader: {sum(by.values()) / 1e9:.2f} GB")
            for k, v in by.most_common(args.top):
                print(f"  {v / 1e9:7.2f} GB  {k[-100:]}")


if __name__ == "__main__":
    main()
