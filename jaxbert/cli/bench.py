"""`jaxbert bench`: jaxbert and transformers (PyTorch) on the same work, each in its own process."""

from __future__ import annotations

import json
from pathlib import Path

from jaxbert.bench.harness import Bench, command_line
from jaxbert.fs import atomic_write_text
from jaxbert.bench.timing import markdown_table


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="fewer repeats and shapes, no torch.compile")
    p.add_argument("--only", nargs="*", default=None,
                   help="run only works whose name starts with one of these (e.g. train infer)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="jaxbert compute dtype (bfloat16 for MFU on accelerators)")
    p.add_argument("--attention", default="einsum", choices=["einsum", "dot_product"])
    p.add_argument("--no-torch", action="store_true", help="time jaxbert alone (no transformers contender)")
    p.add_argument("--malloc", default="system", choices=["system", "tcmalloc"],
                   help="allocator of every worker process (tcmalloc: LD_PRELOAD libtcmalloc_minimal)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)


def run(args) -> int:
    bench = Bench(args)
    bench.run()
    table = markdown_table(bench.records)
    print("\n" + table)
    if args.json:
        atomic_write_text(args.json, json.dumps([r.to_json() for r in bench.records], indent=2) + "\n")
    if args.markdown:
        atomic_write_text(args.markdown, f"Machine: {bench.machine()}\n\nCommand: `{command_line(args)}`\n\n{table}\n")
    return 0
