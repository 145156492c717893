"""`jaxbert bench`: jaxbert and transformers (PyTorch) on the same work, in one sitting.

Each figure is the median of several runs after warm-up, with min and max; the
contenders take turns so that machine load drifts onto all of them alike.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from pathlib import Path

import jax

from ..config import preset
from . import works
from .convert import run_convert_bench
from .flops import peak_flops, train_flops_per_token
from .timing import Record, markdown_table, rate_record, time_interleaved, time_record

MODELS = {"bert-base": "bert-base-uncased", "bert-small": "bert-small", "bert-large": "bert-large-uncased"}


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="fewer repeats and shapes, no torch.compile")
    p.add_argument("--only", nargs="*", default=None,
                   help="run only works whose name starts with one of these (e.g. train infer)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="jaxbert compute dtype (bfloat16 for MFU on accelerators)")
    p.add_argument("--attention", default="einsum", choices=["einsum", "dot_product"])
    p.add_argument("--no-torch", action="store_true",
                   help="time jaxbert alone (no transformers contender in the process)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)


def machine() -> str:
    dev = jax.devices()[0]
    return (f"{platform.machine()} {os.cpu_count()} cores, {dev.platform} ({dev.device_kind}), "
            f"jax {jax.__version__}, Python {platform.python_version()}")


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.repeats = args.repeats or (3 if args.quick else 5)
        self.records: list[Record] = []
        self.roofline = None  # FLOP/s of a large fp32 matmul on this device
        self.options = dict(attention_impl=args.attention,
                            dtype=jax.numpy.bfloat16 if args.dtype == "bfloat16" else jax.numpy.float32)
        self.torch_contenders = [] if args.no_torch else ["torch-eager"] + ([] if args.quick else ["torch-compile"])

    def wanted(self, work: str) -> bool:
        return self.args.only is None or any(work.startswith(o) for o in self.args.only)

    def add(self, record: Record):
        self.records.append(record)
        print(f"{record.work:28s} {record.contender:14s} {record.median:12,.2f} {record.unit:9s} "
              f"[{record.min:,.2f} .. {record.max:,.2f}] {record.extra or ''}", flush=True)

    def _torch(self, builder, *args):
        fns = {}
        for name in self.torch_contenders:
            try:
                fns[name] = builder(*args, compile_=name == "torch-compile")
            except Exception as e:  # transformers or torch missing, or compile unsupported
                print(f"  {name}: skipped ({type(e).__name__}: {e})")
        return fns

    def roofline_work(self):
        n = 2048
        fns = {"jaxbert": works.jax_matmul(n)}
        if self.torch_contenders:
            try:
                fns["torch-eager"] = works.torch_matmul(n)
            except ImportError:
                pass
        secs = time_interleaved(fns, self.repeats * 2, warmup=2)
        for name, s in secs.items():
            self.add(rate_record("roofline", name, s, 2 * n**3 / 1e9, "GFLOP/s"))
        self.roofline = max(statistics.median([2 * n**3 / x for x in s]) for s in secs.values())

    def _contest(self, kind: str, model: str, B: int, T: int, jax_builder, torch_builder):
        """Build every contender for one work, time them in turn: (config, work name, seconds)."""
        cfg = works.no_dropout(preset(MODELS[model]))
        work = f"{kind}/{model}/{B}x{T}"
        fns = {"jaxbert": jax_builder(cfg, B, T, **self.options)}
        fns.update(self._torch(torch_builder, cfg, B, T))
        return cfg, work, self._run(fns, work)

    def infer_work(self, model: str, B: int, T: int):
        _, work, secs = self._contest("infer", model, B, T, works.jax_forward, works.torch_forward)
        for name, s in secs.items():
            self.add(rate_record(work, name, s, B * T, "tokens/s"))

    def train_work(self, model: str, B: int, T: int):
        cfg, work, secs = self._contest("train", model, B, T, works.jax_train, works.torch_train)
        for name, s in secs.items():
            # jaxbert runs the MLM head on the M gathered positions only; transformers on all T.
            f = works.masked_count(T) / T if name == "jaxbert" else 1.0
            flops = train_flops_per_token(cfg, T, f) * B * T
            gflops = flops / statistics.median(s) / 1e9
            extra = {"gflop_per_step": round(flops / 1e9, 1), "gflop_s": round(gflops, 1)}
            if self.roofline:
                extra["roofline_share"] = round(gflops * 1e9 / self.roofline, 3)
            peak = peak_flops(jax.devices()[0].device_kind)
            if peak and name == "jaxbert":
                extra["mfu"] = round(gflops * 1e9 / peak, 3)
            if name == "jaxbert" and works.jax_peak_memory() is not None:
                extra["peak_memory_mb"] = round(works.jax_peak_memory())
            self.add(rate_record(work, name, s, B * T, "tokens/s", **extra))

    def compile_work(self, model: str):
        cfg = works.no_dropout(preset(MODELS[model]))
        B, T = 8, 128
        times = {True: [], False: []}
        for _ in range(1 if self.quick else 2):
            for scan in (True, False):
                jax.clear_caches()
                times[scan].append(works.jax_compile_seconds(cfg, B, T, scan_layers=scan, **self.options))
        for scan in (True, False):
            self.add(time_record(f"compile/{model}/{'scan' if scan else 'unscanned'}", "jaxbert", times[scan]))

    def convert_work(self):
        runs = run_convert_bench(repeats=2 if self.quick else 3)
        for name, rs in runs.items():
            secs = [r["seconds"] for r in rs]
            above = [r["peak_mb"] - r["base_mb"] for r in rs]
            self.add(time_record("convert/bert-base", name, secs,
                                 peak_rss_above_baseline_mb=round(statistics.median(above)),
                                 checkpoint_mb=round(rs[0]["checkpoint_mb"]),
                                 rss_over_checkpoint=round(statistics.median(above) / rs[0]["checkpoint_mb"], 2)))

    def _run(self, fns, work):
        print(f"{work}: warming up {', '.join(fns)}", flush=True)
        return time_interleaved(fns, self.repeats, warmup=1)

    def run(self):
        print(f"machine: {machine()}")
        if self.wanted("roofline"):
            self.roofline_work()
        for B, T in [(8, 128)] + ([] if self.quick else [(32, 128), (8, 512)]):
            if self.wanted(f"infer/bert-base/{B}x{T}"):
                self.infer_work("bert-base", B, T)
        for model, B, T in [("bert-small", 16, 128), ("bert-base", 8, 128)] + (
                [] if self.quick else [("bert-base", 4, 512)]):
            if self.wanted(f"train/{model}/{B}x{T}"):
                self.train_work(model, B, T)
        for model in ("bert-base", "bert-large"):
            if self.wanted(f"compile/{model}"):
                self.compile_work(model)
        if self.wanted("convert"):
            self.convert_work()


def run(args) -> int:
    bench = Bench(args)
    bench.run()
    table = markdown_table(bench.records)
    print("\n" + table)
    if args.json:
        args.json.write_text(json.dumps([r.to_json() for r in bench.records], indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(f"Machine: {machine()}\n\nCommand: `jaxbert bench"
                                 f"{' --quick' if args.quick else ''}`\n\n{table}\n")
    return 0
