"""`jaxbert bench --target TOPOLOGY`: compile-only figures for hardware this machine need not have.

Each row compiles one train step for the target's devices in a fresh worker
process (libtpu admits one process at a time) and reports XLA's per-chip
figures: HBM (arguments + outputs - donated + temporaries), FLOPs, bytes
accessed, the seconds lowering and compiling took, and XLA's FLOPs over the
model FLOPs formula, and the step-time lower bound from the compiled HLO
(jaxbert.plan.roofline) with the MFU ceiling it leaves. jaxbert's step is the training loop's own, from a shipped
recipe; beside it, transformers 4.57's FlaxBertForMaskedLM step as its
run_mlm_flax example trained it, with and without its gradient checkpointing.
A scanned step's cost analysis counts the scan body once, so its FLOPs and
bytes are left out; its HBM is comparable.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxbert.bench.flax_port import compile_old_port_step
from jaxbert.bench.timing import Record, check_only, time_record
from jaxbert.devices import device_hbm_bytes
from jaxbert.model.flops import train_flops_per_token
from jaxbert.plan import batch_search, compile_step
from jaxbert.train import recipe as recipes

# (model, recipe it ships in, per-chip batch, sequence length)
MODELS = {"bert-base": ("bert-base-phase1", 32, 128), "bert-large": ("bert-large-lamb-phase2", 8, 512)}
# (contender, scan_layers, remat policy, fsdp); the old port's remat is its gradient_checkpointing flag.
ROWS = (("jaxbert", False, "none", False), ("jaxbert", False, "full", False),
        ("jaxbert", True, "none", False), ("jaxbert", True, "full", False),
        ("jaxbert", True, "none", True), ("jaxbert", True, "dots", True), ("jaxbert", True, "full", True),
        ("transformers-flax", False, "none", False), ("transformers-flax", False, "full", False))
# The largest per-chip batch that fits the device: jaxbert's shipped layout, the same with each layer's
# input kept in host memory (remat "offload") and the attention and feed-forward run in 4 blocks (the
# optional fifth element: AotWork.chunks), and the old port's best.
MAX_ROWS = (("jaxbert", True, "full", True), ("jaxbert", True, "offload", True, 4),
            ("transformers-flax", False, "full", False))


@dataclasses.dataclass
class AotWork:
    model: str
    contender: str
    scan_layers: bool
    remat_policy: str
    fsdp: bool = False
    chunks: int = 1  # model.attention_chunks and model.ffn_chunks
    largest: bool = False  # search the largest batch that fits instead of compiling the recipe's

    @property
    def name(self) -> str:
        recipe, B, T = MODELS[self.model]
        layout = ("scan" if self.scan_layers else "unscanned") + f"-{self.remat_policy}" + ("-fsdp" if self.fsdp else "")
        layout += f"-chunks{self.chunks}" if self.chunks > 1 else ""
        return f"aot-max/{self.model}/T{T}/{layout}" if self.largest else f"aot/{self.model}/{B}x{T}/{layout}"


def works(models) -> list[AotWork]:
    fixed = [AotWork(m, *row) for m in models for row in ROWS]
    return fixed + [AotWork(m, *row, largest=True) for m in models if m != "bert-base" for row in MAX_ROWS]


def _recipe(model: str, layout: str):
    """The recipe a row's name describes: scan|unscanned-POLICY[-fsdp][-chunksN] (N blocks of attention
    queries and of feed-forward tokens)."""
    scan, policy, *flags = layout.split("-")
    name, B, T = MODELS[model]
    over = [f"model.scan_layers={scan == 'scan'}", f"model.remat_policy={policy}", f"parallel.fsdp={'fsdp' in flags}"]
    for n in (f.removeprefix("chunks") for f in flags if f.startswith("chunks")):  # attention and feed-forward
        over += [f"model.attention_chunks={n}", f"model.ffn_chunks={n}"]
    # one micro-batch, as the old port steps (and XLA counts a micro-batch loop's body once)
    over.append("train.accum_steps=1")
    return recipes.load(name, over), scan == "scan", policy, B, T


def _compile(contender, r, cfg, devices, B, T, policy, hlo_dir=None):
    if contender == "jaxbert":
        return compile_step.compile_train_step(r, cfg, devices, B, hlo_dir=hlo_dir)
    return compile_old_port_step(cfg, devices, B, T, jnp.dtype(r.model.dtype),
                                 gradient_checkpointing=policy != "none", hlo_dir=hlo_dir)


def run_aot_work(work: str, contender: str, target: str, hlo_dir=None) -> dict:
    """In a worker: compile one row for `target`; {'seconds': [lower + compile], 'extra': figures}."""
    work_type, model, shape, layout = work.split("/")
    r, scanned, policy, B, T = _recipe(model, layout)
    cfg = r.model_config()
    devices = compile_step.target_devices(target)
    extra = {"device_kind": devices[0].device_kind, "devices": len(devices)}
    if work_type == "aot-max":
        budget = device_hbm_bytes(devices[0], devices)
        b, seen = batch_search.largest_batch(lambda n: _compile(contender, r, cfg, devices, n, T, policy), budget, start=8)
        extra.update(largest_batch=b, budget_gib=round(budget / 2**30, 2), compiles=len(seen),
                     hbm_gib=round(seen[b].hbm / 2**30, 2) if b in seen else None,
                     over_gib=round(seen[b + 1].hbm / 2**30, 2) if b + 1 in seen else None,
                     host_gib=round(seen[b].host_temporaries / 2**30, 2) if b in seen else None)
        return {"seconds": [sum(c.lower_s + c.compile_s for c in seen.values())], "extra": extra}
    cost = _compile(contender, r, cfg, devices, B, T, policy, hlo_dir)
    if contender == "jaxbert":
        model_flops = batch_search.model_flops_per_device(r, cfg, B)
    else:
        model_flops = train_flops_per_token(cfg, T, 1.0) * B * T  # its head runs at every position
    extra.update(hbm_gb=round(cost.hbm / 1e9, 2), hbm_gib=round(cost.hbm / 2**30, 2),
                 temp_gb=round(cost.temporaries / 1e9, 2), model_gflop=round(model_flops / 1e9, 1))
    extra.update(bound_extra(cost, model_flops, B * T))
    if not scanned and cost.flops:
        extra.update(gflop=round(cost.flops / 1e9, 1), gb_accessed=round(cost.bytes_accessed / 1e9, 1),
                     xla_over_model_flops=round(cost.flops / model_flops, 3))
    return {"seconds": [cost.lower_s + cost.compile_s], "extra": extra}


def bound_extra(cost, model_flops: float, tokens: int) -> dict:
    """The bound's figures for a row: ms, tokens/s per device it allows, MFU ceiling, memory-bound share."""
    b = cost.bound
    if b is None:
        return {}
    return {"bound_ms": round(b.seconds * 1e3, 2), "bound_tokens_per_s": round(tokens / b.seconds),
            "mfu_ceiling": round(b.mfu_ceiling(model_flops), 3), "memory_bound_share": round(b.memory_bound_share, 3),
            "collective_ms": round(b.collective_s * 1e3, 2)}


def _table(records: list[Record], prefix: str, title: str, columns: dict) -> str:
    """Markdown: a row per record of kind `prefix`; columns maps header -> extra key (or a callable of the record)."""
    dash = lambda v: f"{v:,}" if v is not None else "—"
    lines = [f"| {title} | contender | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for r in records:
        if r.work.startswith(prefix + "/"):
            cells = [v(r) if callable(v) else dash((r.extra or {}).get(v)) for v in columns.values()]
            lines.append(f"| {r.work.removeprefix(prefix + '/')} | {r.contender} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def target_table(records: list[Record], target: str) -> str:
    """Markdown: one row per compiled step, then the largest batches."""
    out = _table(records, "aot", f"step ({target})", {
        "HBM per device GiB": "hbm_gib", "GFLOP per device": "gflop", "GB accessed": "gb_accessed",
        "XLA / model FLOPs": "xla_over_model_flops", "bound ms": "bound_ms", "MFU ceiling": "mfu_ceiling",
        "compile s": lambda r: f"{r.median:.0f}"})
    out += ("\n\nGiB = 2^30 bytes; GFLOP and GB = 10^9. A device is what the topology lists "
            "(v2-v4: one TensorCore, half a chip). A scanned step's FLOPs and bytes count its loop body once: left out. "
            "bound ms: the step-time lower bound from the compiled HLO, per device (jaxbert.plan.roofline: each "
            "operation at the device's peak FLOP/s or HBM bandwidth, whichever binds, plus collectives over the "
            "interconnect), counting a scanned step's loop body per iteration; MFU ceiling: model FLOPs / (bound x peak).")
    if any(r.work.startswith("aot-max/") for r in records):
        out += "\n\n" + _table(records, "aot-max", f"largest batch ({target})", {
            "sequences per device": "largest_batch", "HBM GiB": "hbm_gib", "one more GiB": "over_gib",
            "budget GiB": "budget_gib", "host GiB": "host_gib", "compiles": "compiles"})
    return out


def run_target_bench(args, worker) -> list[Record]:
    """Every row for args.target, each compiled by `worker(spec) -> result | None` in a fresh process."""
    models = ["bert-base"] if args.quick else list(MODELS)
    records = []
    all_works = works(models)
    check_only(args.only, sorted({w.name for w in all_works} | {w.contender for w in all_works}))
    for w in all_works:
        if args.only is not None and not any(w.name.startswith(o) or w.contender.startswith(o) for o in args.only):
            continue
        out = worker({"work": w.name, "contender": w.contender, "repeats": 1,
                      "options": {"target": args.target}})
        if out is None:
            continue
        record = time_record(w.name, w.contender, out["seconds"], **out["extra"])
        records.append(record)
        e = record.extra
        if w.largest:
            print(f"{w.name:36s} {w.contender:18s} largest batch {e['largest_batch']} ({e['hbm_gib']} GiB of "
                  f"{e['budget_gib']}; {e['compiles']} compiles, {record.median:.0f}s)", flush=True)
        else:
            print(f"{w.name:36s} {w.contender:18s} HBM {e['hbm_gib']:6.2f} GiB  GFLOP {e.get('gflop', '—')!s:>8}  "
                  f"GB accessed {e.get('gb_accessed', '—')!s:>6}  bound {e.get('bound_ms', '—')!s:>7} ms  "
                  f"MFU ceiling {e.get('mfu_ceiling', '—')!s:>5}  compile {record.median:.0f}s", flush=True)
    return records
