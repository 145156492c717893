"""`jaxbert bench`: jaxbert and transformers (PyTorch) on the same work, in one sitting.

Each (work, contender) runs alone in a fresh interpreter (jaxbert.bench.worker),
the contenders of a work one after the other; each figure is the median of
several timed calls after warm-up, with min and max. The parent process only
schedules and reports: it never starts a jax backend, so on an accelerator the
workers have the device to themselves.

On a GPU (the device worker reports platform "gpu") both sides run as their
users run them there (device_options, contenders.torch_settings): jaxbert with
bf16 compute and attention_impl "dot_product" (cuDNN fused attention);
transformers on CUDA with bf16 autocast, SDPA attention and fused AdamW, and
torch.compile as a second contender. Every train/infer row then reports MFU
against the device's bf16 peak and the peak memory of its process.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys

from jaxbert.errors import InputError
from jaxbert.model.config import preset
from jaxbert.bench import contenders
from jaxbert.bench.convert import run_convert_bench
from jaxbert.devices import peak_flops
from jaxbert.model.flops import forward_flops_per_token, train_flops_per_token
from jaxbert.bench.timing import Record, rate_record, time_record
from jaxbert.bench.worker import MODELS

TCMALLOC_PATHS = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
                  "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
                  "/usr/lib64/libtcmalloc_minimal.so.4", "/usr/lib/libtcmalloc_minimal.so.4")


def find_tcmalloc() -> str | None:
    return next((p for p in TCMALLOC_PATHS if os.path.exists(p)), None)


def device_options(platform: str, dtype: str | None, attention: str | None) -> dict:
    """The options every worker gets on `platform`: on a GPU bf16 and dot_product attention unless asked
    otherwise; elsewhere fp32 and einsum. The platform rides along for the PyTorch contender's settings."""
    gpu = platform == "gpu"
    return {"dtype": dtype or ("bfloat16" if gpu else "float32"),
            "attention": attention or ("dot_product" if gpu else "einsum"), "platform": platform}


def mfu(tokens_per_s: float, flops_per_token: float, peak: float) -> float:
    """Model FLOPs utilisation: tokens/s x FLOPs per token / peak FLOP/s."""
    return tokens_per_s * flops_per_token / peak


def run_worker(spec: dict, env: dict | None = None) -> dict | None:
    """Run one spec in a fresh interpreter; None (and the reason printed) if it failed."""
    proc = subprocess.run([sys.executable, "-m", "jaxbert.bench.worker", json.dumps(spec)],
                          capture_output=True, text=True, env=env or None)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  {spec['work']} {spec['contender']}: skipped ({tail})", flush=True)
        return None
    return json.loads(lines[-1])


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.repeats = args.repeats or (3 if args.quick else 5)
        self.records: list[Record] = []
        self.roofline = None  # FLOP/s of a large fp32 matmul: the faster contender's
        self.options = {**device_options("cpu", args.dtype, args.attention), "malloc": args.malloc}
        self.torch_contenders = [] if args.no_torch else ["torch-eager"] + ([] if args.quick else ["torch-compile"])
        self.env = dict(os.environ)
        if args.malloc == "tcmalloc":
            lib = find_tcmalloc()
            if lib is None:
                raise InputError("--malloc tcmalloc: libtcmalloc_minimal.so.4 not found in "
                                 f"{', '.join(TCMALLOC_PATHS)} (Debian/Ubuntu: apt install libtcmalloc-minimal4)")
            self.env["LD_PRELOAD"] = ":".join(filter(None, [self.env.get("LD_PRELOAD"), lib]))
        device = self._worker({"work": "device", "contender": "jaxbert", "repeats": 0})
        if device is None:
            raise InputError("a worker process could not start jax (see the line above)")
        self.device = device["extra"]
        self.options.update(device_options(self.device["platform"], args.dtype, args.attention))
        if self.device["platform"] == "gpu" and not args.no_torch and "torch-compile" not in self.torch_contenders:
            self.torch_contenders.append("torch-compile")  # on a GPU torch.compile is how its users train

    def machine(self) -> str:
        d = self.device
        return (f"{platform.machine()} {os.cpu_count()} cores, {d['platform']} ({d['device_kind']}), "
                f"jax {d['jax']}, Python {platform.python_version()}, malloc {self.args.malloc}")

    def wanted(self, work: str) -> bool:
        return self.args.only is None or any(work.startswith(o) for o in self.args.only)

    def add(self, record: Record):
        self.records.append(record)
        print(f"{record.work:28s} {record.contender:14s} {record.median:12,.2f} {record.unit:9s} "
              f"[{record.min:,.2f} .. {record.max:,.2f}] {record.extra or ''}", flush=True)

    def _worker(self, spec: dict) -> dict | None:
        return run_worker({"options": self.options, **spec}, self.env)

    def _contest(self, work: str, contenders: list[str]) -> dict[str, dict]:
        print(f"{work}: {', '.join(contenders)}", flush=True)
        results = {}
        for name in contenders:
            out = self._worker({"work": work, "contender": name, "repeats": self.repeats})
            if out is not None:
                results[name] = out
        return results

    def roofline_work(self):
        n = 2048
        results = self._contest("roofline", ["jaxbert"] + self.torch_contenders[:1])
        medians = []
        for name, out in results.items():
            self.add(rate_record("roofline", name, out["seconds"], 2 * n**3 / 1e9, "GFLOP/s"))
            medians.append(statistics.median(2 * n**3 / s for s in out["seconds"]))
        self.roofline = max(medians) if medians else None

    def model_work(self, work_type: str, model: str, B: int, T: int):
        cfg = contenders.no_dropout(preset(MODELS[model]))
        work = f"{work_type}/{model}/{B}x{T}"
        for name, out in self._contest(work, ["jaxbert"] + self.torch_contenders).items():
            # jaxbert trains the MLM head on the M gathered positions only; transformers on all T.
            f = contenders.masked_count(T) / T if (name == "jaxbert" and work_type == "train") else 1.0
            if work_type == "finetune":  # no MLM head: the classifier's H x K is negligible
                f = 0.0
            per_token = forward_flops_per_token if work_type == "infer" else train_flops_per_token
            flops = per_token(cfg, T, f) * B * T
            gflops = flops / statistics.median(out["seconds"]) / 1e9
            extra = {"gflop_per_step": round(flops / 1e9, 1), "gflop_s": round(gflops, 1)}
            if self.roofline:
                extra["roofline_share"] = round(gflops * 1e9 / self.roofline, 3)
            peak = peak_flops(self.device["device_kind"])
            if peak and (name == "jaxbert" or self.device["platform"] == "gpu"):
                # each side's own FLOPs (transformers' head at every position): the work it really does
                tokens_per_s = B * T / statistics.median(out["seconds"])
                extra["mfu"] = round(mfu(tokens_per_s, flops / (B * T), peak), 3)
            extra.update(out["extra"])
            self.add(rate_record(work, name, out["seconds"], B * T, "tokens/s", **extra))

    def compile_work(self, model: str):
        for layout in ("scan", "unscanned"):
            work = f"compile/{model}/{layout}"
            runs = [self._worker({"work": work, "contender": "jaxbert", "repeats": 1})
                    for _ in range(1 if self.quick else 2)]
            secs = [s for r in runs if r is not None for s in r["seconds"]]
            if secs:
                self.add(time_record(work, "jaxbert", secs))

    def convert_work(self):
        runs = run_convert_bench(repeats=2 if self.quick else 3)
        for name, rs in runs.items():
            secs = [r["seconds"] for r in rs]
            above = [r["peak_mb"] - r["base_mb"] for r in rs]
            self.add(time_record("convert/bert-base", name, secs,
                                 peak_rss_above_baseline_mb=round(statistics.median(above)),
                                 checkpoint_mb=round(rs[0]["checkpoint_mb"]),
                                 rss_over_checkpoint=round(statistics.median(above) / rs[0]["checkpoint_mb"], 2)))

    def run(self):
        print(f"machine: {self.machine()}", flush=True)
        if self.wanted("roofline"):
            self.roofline_work()
        for B, T in infer_shapes(self.quick):
            if self.wanted(f"infer/bert-base/{B}x{T}"):
                self.model_work("infer", "bert-base", B, T)
        for model, B, T in train_shapes(self.quick):
            if self.wanted(f"train/{model}/{B}x{T}"):
                self.model_work("train", model, B, T)
        for model, B, T in FINETUNE_SHAPES:
            if self.wanted(f"finetune/{model}/{B}x{T}"):
                self.model_work("finetune", model, B, T)
        for model in COMPILE_MODELS:
            if self.wanted(f"compile/{model}"):
                self.compile_work(model)
        if self.wanted("convert"):
            self.convert_work()


COMPILE_MODELS = ("bert-base", "bert-large")
# Sequence classification fine-tuning at GLUE's batch and length (finetune-glue: 32 x 128).
FINETUNE_SHAPES = (("bert-base", 32, 128),)


def infer_shapes(quick: bool) -> list[tuple[int, int]]:
    return [(8, 128)] + ([] if quick else [(32, 128), (8, 512)])


def train_shapes(quick: bool) -> list[tuple[str, int, int]]:
    return [("bert-small", 16, 128), ("bert-base", 8, 128)] + ([] if quick else [("bert-base", 4, 512)])


def work_names(quick: bool) -> list[str]:
    """Every work Bench.run times (with --quick: fewer)."""
    return (["roofline"] + [f"infer/bert-base/{B}x{T}" for B, T in infer_shapes(quick)]
            + [f"train/{m}/{B}x{T}" for m, B, T in train_shapes(quick)]
            + [f"finetune/{m}/{B}x{T}" for m, B, T in FINETUNE_SHAPES]
            + [f"compile/{m}/{layout}" for m in COMPILE_MODELS for layout in ("scan", "unscanned")]
            + ["convert/bert-base"])


def command_line(args) -> str:
    parts = ["jaxbert bench"]
    if args.quick:
        parts.append("--quick")
    if args.malloc != "keep":
        parts.append(f"--malloc {args.malloc}")
    if args.dtype is not None:
        parts.append(f"--dtype {args.dtype}")
    if args.attention is not None:
        parts.append(f"--attention {args.attention}")
    if args.no_torch:
        parts.append("--no-torch")
    if args.only:
        parts.append("--only " + " ".join(args.only))
    return " ".join(parts)
