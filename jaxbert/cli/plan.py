"""`jaxbert plan`: the largest per-device batch that fits, per remat policy, and the best of them.

Where the device's peak FLOP/s and memory bandwidth are known (TPUs, GPUs), each candidate also shows the
step-time lower bound of its compiled step (jaxbert.plan.roofline), the tokens/s it allows and the MFU
ceiling, and the candidates are ranked by those tokens/s."""

from __future__ import annotations

import json
import math
from pathlib import Path

from jaxbert import fs
from jaxbert.devices import device_memory
from jaxbert.errors import InputError
from jaxbert.model.options import REMAT_POLICIES
from jaxbert.plan import batch_search, compile_step
from jaxbert.train import recipe as recipes


def add_arguments(p):
    p.add_argument("--recipe", default=None, help="plan this recipe (name or YAML path); default: a bf16 "
                   "recipe built from --preset and --seq-len")
    p.add_argument("--preset", default=None, help="model preset (bert-base-uncased, bert-large-uncased, ...)")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--target", default="local", metavar="TOPOLOGY",
                   help="TPU topology (v4:2x2x1, v5e:2x2; needs the tpu extra) or local (default)")
    p.add_argument("--hbm", type=float, default=None, metavar="GiB",
                   help="memory budget per device (default: the device's own)")
    p.add_argument("--fsdp", action="store_true", help="shard params and optimizer state (parallel.fsdp)")
    p.add_argument("--policies", nargs="+", default=None,
                   help="remat policies to try (default: none dots full; also dots_no_batch, "
                        "offload: full with the layer inputs in host memory)")
    p.add_argument("--scan", default="recipe", choices=["recipe", "yes", "no", "both"],
                   help="layer layouts to try (default: the recipe's scan_layers)")
    p.add_argument("--start", type=int, default=8, help="first batch compiled")
    p.add_argument("--max-batch", type=int, default=4096)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    p.add_argument("--json", type=Path, default=None, help="write the plan as JSON (an existing file is refused)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --json when it is an earlier `jaxbert plan` report (anything else is refused)")


def _recipe(args):
    overrides = list(args.set)
    if args.preset:
        overrides.append(f"model.preset={args.preset}")
    if args.seq_len:
        overrides.append(f"data.seq_len={args.seq_len}")
    if args.fsdp:
        overrides.append("parallel.fsdp=true")
    if args.recipe:
        return recipes.load(args.recipe, overrides)
    if not args.preset or not args.seq_len:
        raise InputError("give --recipe, or --preset and --seq-len")
    data = {"name": f"plan-{args.preset}-{args.seq_len}", "model": {"dtype": "bfloat16"}}
    model_class = recipes.preset_model_class(args.preset)  # the preset's family's class; --set may change it
    if model_class is not None:
        data["model"]["model_class"] = model_class
    for item in overrides:
        recipes.apply_override(data, item)
    return recipes.from_dict(data)


def _check_args(args) -> None:
    """Every numeric option and policy name, before a compile."""
    if args.recipe and args.preset:  # the recipe's model.config would override the preset's sizes: not ignored
        raise InputError(f"--preset {args.preset}: give --recipe or --preset, not both (a recipe names its own "
                         f"model; to change it, --set model.preset=... and --set model.config... in full)")
    if args.hbm is not None and not (math.isfinite(args.hbm) and args.hbm > 0):
        raise InputError(f"--hbm {args.hbm}: must be a finite number of GiB > 0")
    for flag, value in (("--max-batch", args.max_batch), ("--start", args.start), ("--seq-len", args.seq_len)):
        if value is not None and value < 1:
            raise InputError(f"{flag} {value}: must be >= 1")
    for policy in args.policies or ():
        if policy not in REMAT_POLICIES:
            raise InputError(f"--policies {policy}: not a remat policy; choose from {', '.join(REMAT_POLICIES)}")


PLAN_REPORT_KEYS = ("recipe", "target", "budget_bytes", "candidates", "recommended")


def run(args) -> int:
    if args.json:
        fs.check_new_file(args.json, "--json", args.overwrite, ours=fs.json_report_of(*PLAN_REPORT_KEYS))
    _check_args(args)
    compile_step.check_target(args.target)
    r = _recipe(args)
    cfg = r.model_config()
    devices = compile_step.target_devices(args.target)
    if args.hbm:
        budget, source = int(args.hbm * 2**30), "--hbm"
    else:
        budget, source = device_memory(devices[0], devices)
    if budget is None:
        raise InputError(f"--hbm: the memory of {devices[0].device_kind} is unknown; give a budget in GiB")
    mem = "memory" if devices[0].platform == "cpu" else "HBM"
    scans = {"recipe": (r.model.scan_layers,), "yes": (True,), "no": (False,), "both": (False, True)}[args.scan]
    policies = tuple(args.policies) if args.policies else batch_search.POLICIES
    print(f"plan {r.name}: {cfg.num_hidden_layers}x{cfg.hidden_size}, T={r.data.seq_len}, "
          f"{r.model.dtype} compute, fsdp={r.parallel.fsdp}, accum={r.train.accum_steps}; "
          f"{len(devices)} x {devices[0].device_kind}, budget {budget / 2**30:.2f} GiB per device "
          f"({source})", flush=True)
    if batch_search.objective_line(r, cfg):  # an RTD recipe: both models compiled and counted
        print(batch_search.objective_line(r, cfg), flush=True)
    cands = batch_search.plan(r, cfg, devices, budget, policies, scans, args.start, args.max_batch,
                      log=lambda m: print(m, flush=True))
    choice = batch_search.best(cands)
    split = None
    fixed_batch = args.recipe and r.train.per_device_batch_size != "auto"
    print("\n" + table(cands, None if fixed_batch else choice, mem))
    bound = next((c.fit.bound for c in cands if c.bound_s()), None)
    if bound is not None:
        ici = f"{bound.interconnect_bandwidth / 1e9:.0f} GB/s" if bound.interconnect_bandwidth else "unknown"
        print(f"\nbound: the sum over the compiled step's operations of max(FLOPs / {bound.peak_flops / 1e12:.1f} "
              f"TFLOP/s, bytes / {bound.memory_bandwidth / 1e9:.0f} GB/s), plus collective bytes / {ici} "
              "(figures per device; jaxbert.plan.roofline): no step of that HLO runs faster")
    if fixed_batch:  # the recipe's own batch is what to recommend: one recommendation, the split's
        split = _recipe_split(r, cfg, devices, budget, cands, args.max_batch, mem)
    else:
        why = ("the most tokens/s its step-time bound allows" if batch_search.ranked_by_bound(cands) else
               "the most useful FLOPs per step; no step-time bound: the device's peak and bandwidth are unknown")
        print(f"\nrecommended: scan_layers={choice.scan_layers} remat_policy={choice.remat_policy} "
              f"per_device_batch_size={choice.batch} ({why}, the batch left free)")
        if args.recipe:
            print("\nthe recipe's per_device_batch_size is auto: a run plans it for its own devices")
    if args.json:
        fs.atomic_write_text(args.json, json.dumps({"recipe": r.name, "target": args.target, "budget_bytes": budget,
                                         "budget_source": source,
                                         "candidates": [_row(c) for c in cands],
                                         "recommended": _row(choice),
                                         "recipe_batch": split}, indent=2) + "\n")
    return 0


def _recipe_split(r, cfg, devices, budget, cands, max_batch: int = 4096, mem: str = "HBM") -> dict:
    """The recipe's own sequences per device per step as micro-batches that fit: printed, and returned for --json."""
    total = r.train.per_device_batch_size * r.train.accum_steps
    print(f"\nthe recipe's {total} sequences per device per step (per_device_batch_size "
          f"{r.train.per_device_batch_size} x accum_steps {r.train.accum_steps}; {total * len(devices)} per step "
          f"on {'these' if len(devices) > 1 else 'this'} {len(devices)} device{'s' if len(devices) > 1 else ''}):",
          flush=True)
    splits = batch_search.split_recipe_batch(r, cfg, devices, budget, cands, log=lambda m: print(m, flush=True),
                                     max_batch=max_batch)
    rows = [{"scan_layers": s.candidate.scan_layers, "remat_policy": s.candidate.remat_policy,
             "per_device_batch_size": s.size, "accum_steps": s.micro_batches,
             "hbm_bytes": s.cost.hbm if s.cost else None} for s in splits]
    print(f"\n| scan | remat | per_device_batch_size | accum_steps | {mem} GiB (where compiled) |\n|---|---|---|---|---|")
    for i, row in enumerate(rows):
        hbm = f"{row['hbm_bytes'] / 2**30:.2f}" if row["hbm_bytes"] is not None else "—"
        mark = " **(recommended)**" if i == 0 else ""
        print(f"| {row['scan_layers']} | {row['remat_policy']}{mark} | {row['per_device_batch_size']} | "
              f"{row['accum_steps']} | {hbm} |")
    if rows:
        best = rows[0]
        print(f"\nrecommended for the recipe's batch (least recomputation, then fewest micro-batches): "
              f"scan_layers={best['scan_layers']} remat_policy={best['remat_policy']} "
              f"per_device_batch_size={best['per_device_batch_size']} accum_steps={best['accum_steps']}")
    else:
        print(f"\nno candidate takes the recipe's {total} sequences per device in micro-batches that fit")
    return {"sequences_per_device": total, "global_batch": total * len(devices), "splits": rows,
            "recommended": rows[0] if rows else None}


def _row(c) -> dict:
    return {"scan_layers": c.scan_layers, "remat_policy": c.remat_policy, "batch": c.batch,
            "hbm_bytes": c.fit.hbm if c.fit else None, "over_hbm_bytes": c.over.hbm if c.over else None,
            "host_bytes": c.fit.host_temporaries if c.fit else None,
            "remat_extra_flops": c.remat_extra, "useful_flops": c.useful_flops, "compiles": c.compiles,
            "bound_s": c.bound_s(), "bound_tokens_per_s": c.bound_tokens_per_s(), "mfu_ceiling": c.mfu_ceiling(),
            "bound": c.fit.bound.to_json() if c.fit is not None and c.fit.bound is not None else None}


def table(cands, choice, mem: str = "HBM") -> str:
    """The candidates, best first where ranked by the bound; the "FLOPs remat adds" column only where some
    compile measured it, the bound's columns only where some compile had one."""
    measured = any(c.remat_extra is not None for c in cands)
    bounded = any(c.bound_s() for c in cands)
    head = ["scan", "remat", "largest batch", f"{mem} GiB", f"batch+1 {mem} GiB", "host GiB"] + (
        ["FLOPs remat adds"] if measured else []) + ["useful TFLOP/step/device"] + (
        ["bound ms", "tokens/s/device at bound", "MFU ceiling"] if bounded else []) + ["compiles"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if batch_search.ranked_by_bound(cands):
        key = batch_search.rank_key(cands)
        cands = sorted(cands, key=lambda c: key(c) if c.batch > 0 else (-1.0, 0), reverse=True)
    for c in cands:
        gib = lambda s: f"{s.hbm / 2**30:.2f}" if s else "—"
        host = f"{c.fit.host_temporaries / 2**30:.2f}" if c.fit else "—"  # remat offload keeps layer inputs there
        extra = [f"{c.remat_extra:+.1%}" if c.remat_extra is not None else "—"] if measured else []
        mark = " **(recommended)**" if c is choice else ""
        bound = []
        if bounded:
            b = c.bound_s()
            bound = [f"{b * 1e3:.2f}", f"{c.bound_tokens_per_s():,.0f}", f"{c.mfu_ceiling():.1%}"] if b else ["—"] * 3
        cells = [str(c.scan_layers), f"{c.remat_policy}{mark}", str(c.batch), gib(c.fit), gib(c.over), host,
                 *extra, f"{c.useful_flops / 1e12:.2f}", *bound, str(c.compiles)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
