"""`jaxbert bench --target TOPOLOGY`: compile-only figures for hardware this machine need not have.

Each row compiles one train step for the target's devices in a fresh worker
process (libtpu admits one process at a time) and reports XLA's per-chip
figures: HBM (arguments + outputs - donated + temporaries), FLOPs, bytes
accessed, the seconds lowering and compiling took, and XLA's FLOPs over the
model FLOPs formula. jaxbert's step is the training loop's own, from a shipped
recipe; beside it, transformers 4.57's FlaxBertForMaskedLM step as its
run_mlm_flax example trained it, with and without its gradient checkpointing.
A scanned step's cost analysis counts the scan body once, so its FLOPs and
bytes are left out; its HBM is comparable.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxbert.bench.oldport import compile_old_port_step
from jaxbert.bench.timing import Record, time_record
from jaxbert.model.flops import train_flops_per_token
from jaxbert.train import aot, plan
from jaxbert.train import recipe as recipes

# (model, recipe it ships in, per-chip batch, sequence length)
MODELS = {"bert-base": ("bert-base-phase1", 32, 128), "bert-large": ("bert-large-lamb-phase2", 8, 512)}
# (contender, scan_layers, remat policy); the old port's remat is its gradient_checkpointing flag.
ROWS = (("jaxbert", False, "none"), ("jaxbert", False, "full"), ("jaxbert", True, "none"),
        ("jaxbert", True, "dots"), ("jaxbert", True, "full"),
        ("transformers-flax", False, "none"), ("transformers-flax", False, "full"))


@dataclasses.dataclass
class AotWork:
    model: str
    contender: str
    scan_layers: bool
    remat_policy: str

    @property
    def name(self) -> str:
        recipe, B, T = MODELS[self.model]
        layout = "scan" if self.scan_layers else "unscanned"
        return f"aot/{self.model}/{B}x{T}/{layout}-{self.remat_policy}"


def works(models) -> list[AotWork]:
    return [AotWork(m, *row) for m in models for row in ROWS]


def run_aot_work(work: str, contender: str, target: str) -> dict:
    """In a worker: compile one row for `target`; {'seconds': [lower + compile], 'extra': figures}."""
    _, model, shape, layout = work.split("/")
    scan, policy = layout.split("-", 1)
    name, B, T = MODELS[model]
    r = recipes.load(name, [f"model.scan_layers={scan == 'scan'}", f"model.remat_policy={policy}"])
    cfg = r.bert_config()
    devices = aot.target_devices(target)
    if contender == "jaxbert":
        cost = aot.compile_train_step(r, cfg, devices, B)
        model_flops = plan.model_flops_per_device(r, cfg, B)
    else:
        cost = compile_old_port_step(cfg, devices, B, T, jnp.dtype(r.model.dtype),
                                     gradient_checkpointing=policy != "none")
        model_flops = train_flops_per_token(cfg, T, 1.0) * B * T  # its head runs at every position
    extra = {"device_kind": devices[0].device_kind, "devices": len(devices),
             "hbm_gb": round(cost.hbm / 1e9, 2), "hbm_gib": round(cost.hbm / 2**30, 2),
             "temp_gb": round(cost.temporaries / 1e9, 2),
             "model_gflop": round(model_flops / 1e9, 1)}
    if not (scan == "scan") and cost.flops:
        extra.update(gflop=round(cost.flops / 1e9, 1), gb_accessed=round(cost.bytes_accessed / 1e9, 1),
                     xla_over_model_flops=round(cost.flops / model_flops, 3))
    return {"seconds": [cost.lower_s + cost.compile_s], "extra": extra}


def target_table(records: list[Record], target: str) -> str:
    """Markdown: one row per compiled step."""
    lines = [f"| step ({target}) | HBM per chip GiB | GFLOP per chip | GB accessed | XLA / model FLOPs | compile s |",
             "|---|---|---|---|---|---|"]
    for r in records:
        e = r.extra or {}
        dash = lambda k: f"{e[k]:,}" if k in e else "—"
        lines.append(f"| {r.work.removeprefix('aot/')} {r.contender} | {dash('hbm_gib')} | {dash('gflop')} | "
                     f"{dash('gb_accessed')} | {dash('xla_over_model_flops')} | {r.median:.0f} |")
    return "\n".join(lines) + ("\n\nGiB = 2^30 bytes; GFLOP and GB = 10^9. A scanned step's FLOPs and bytes "
                               "count its loop body once: left out.")


def run_target_bench(args, worker) -> list[Record]:
    """Every row for args.target, each compiled by `worker(spec) -> result | None` in a fresh process."""
    models = ["bert-base"] if args.quick else list(MODELS)
    records = []
    for w in works(models):
        if args.only is not None and not any(w.name.startswith(o) or w.contender.startswith(o) for o in args.only):
            continue
        out = worker({"work": w.name, "contender": w.contender, "repeats": 1,
                      "options": {"target": args.target}})
        if out is None:
            continue
        record = time_record(w.name, w.contender, out["seconds"], **out["extra"])
        records.append(record)
        e = record.extra
        print(f"{w.name:36s} {w.contender:18s} HBM {e['hbm_gib']:6.2f} GiB  GFLOP {e.get('gflop', '—')!s:>8}  "
              f"GB accessed {e.get('gb_accessed', '—')!s:>6}  compile {record.median:.0f}s", flush=True)
    return records
