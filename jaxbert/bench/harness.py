"""`jaxbert bench`: jaxbert and transformers (PyTorch) on the same work, in one sitting.

Each (work, contender) has its own interpreter (jaxbert.bench.worker --serve, started
and taken in turns by jaxbert.bench.contest), built and warmed up once and kept warm
while the contenders take turns: rounds of jaxbert, peer, jaxbert, peer, ...
(timing.round_schedule), one timed call each per round (a few for the short roofline
matmul). Only the contender whose turn it is runs; the
others wait on a pipe. Each contender's figure is the median over all its calls with
min and max; each peer's jaxbert/peer ratio is the median of the per-round ratios,
with their spread and a verdict when the run was too noisy to judge
(timing.round_ratio, timing.NOISY_SPREAD). The parent process only schedules and
reports: it never starts a jax backend, so on an accelerator the workers have the
device to themselves.

The end-to-end rows (finetune-e2e, predict: jaxbert.bench.e2e) alternate fresh
commands the same way, since their start-up is part of what they measure.

On a GPU (the device worker reports platform "gpu") both sides run as their
users run them there (device_options, contenders.torch_settings): jaxbert with
bf16 compute and attention_impl "dot_product" (jax.nn.dot_product_attention);
transformers on CUDA with bf16 autocast, SDPA attention and fused AdamW, and
torch.compile as a second contender. Every train/infer row then reports MFU
against the device's bf16 peak and the peak memory of its process.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from pathlib import Path

from jaxbert.errors import InputError
from jaxbert.model.configs import preset
from jaxbert.bench import contenders
from jaxbert.bench.convert import run_convert_bench
from jaxbert.devices import peak_flops
from jaxbert.model.flops import forward_flops_per_token, train_flops_per_token
from jaxbert.bench import e2e
from jaxbert.bench.machine import this_machine
from jaxbert.bench.contest import WorkerFailed, alternate, ratios_for, run_worker, start_worker
from jaxbert.bench.timing import Record, rate_record, round_schedule, time_record
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


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.repeats = args.repeats or (3 if args.quick else 5)  # single-contender works: compile, convert
        self.rounds = getattr(args, "rounds", None) or (7 if args.quick else 11)
        self.e2e_rounds = getattr(args, "e2e_rounds", None) or 3
        self.machine_line, self.machine_tag = this_machine()
        self.records: list[Record] = []
        self.roofline = None  # FLOP/s of a large fp32 matmul: the faster contender's
        self.options = {**device_options("cpu", args.dtype, args.attention), "malloc": args.malloc}
        self.torch_contenders = [] if args.no_torch else ["torch-eager"] + ([] if args.quick else ["torch-compile"])
        self.env = dict(os.environ)
        # The contenders' processes live side by side: jax must not claim 75% of a GPU's memory up front
        # (its default), or the PyTorch contender runs out of memory. A no-op on a CPU.
        self.env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
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
        """The line `jaxbert bench` prints first: CPU model and instruction-set level, cores, versions,
        then the device jax found and the malloc setting."""
        d = self.device
        return (f"{self.machine_line}; {d['platform']} ({d['device_kind']}), Python {platform.python_version()}, "
                f"malloc {self.args.malloc}")

    def wanted(self, work: str) -> bool:
        return self.args.only is None or any(work.startswith(o) for o in self.args.only)

    def add(self, record: Record):
        self.records.append(record)
        ratio = f" jaxbert/peer {record.ratio.text()}" if record.ratio is not None else ""
        print(f"{record.work:28s} {record.contender:14s} {record.median:12,.2f} {record.unit:9s} "
              f"[{record.min:,.2f} .. {record.max:,.2f}]{ratio} {record.extra or ''}", flush=True)

    def _worker(self, spec: dict) -> dict | None:
        return run_worker({"options": self.options, **spec}, self.env)

    def _contest(self, work: str, contenders: list[str], calls: int = 1,
                 options: dict | None = None) -> dict[str, dict]:
        """Every contender warm in its own process, then self.rounds rounds in the stated order."""
        print(f"{work}: {self.rounds} rounds of {', '.join(contenders)}", flush=True)
        workers = {}
        try:
            for name in contenders:
                try:
                    workers[name] = start_worker({"options": options or self.options, "work": work,
                                                  "contender": name}, self.env)
                except WorkerFailed as e:
                    print(f"  {work} {name}: skipped ({e})", flush=True)
            results = alternate(workers, self.rounds, calls, say=lambda m: print(m, flush=True))
        finally:
            for w in workers.values():
                w.close()
        for name, ratio in ratios_for(results).items():
            results[name]["ratio"] = ratio
        return results

    def roofline_work(self):
        n = 2048
        results = self._contest("roofline", ["jaxbert"] + self.torch_contenders[:1], calls=3)
        medians = []
        for name, out in results.items():
            rec = rate_record("roofline", name, out["seconds"], 2 * n**3 / 1e9, "GFLOP/s")
            rec.ratio = out.get("ratio")
            self.add(rec)
            medians.append(statistics.median(2 * n**3 / s for s in out["seconds"]))
        self.roofline = max(medians) if medians else None

    def model_work(self, work_type: str, model: str, B: int, T: int):
        cfg = contenders.no_dropout(preset(MODELS[model]))
        work = f"{work_type}/{model}/{B}x{T}"
        # on an accelerator one step takes milliseconds: several calls per round, so launch jitter averages out
        calls = 1 if self.device["platform"] == "cpu" else 10
        for name, out in self._contest(work, ["jaxbert"] + self.torch_contenders, calls).items():
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
            rec = rate_record(work, name, out["seconds"], B * T, "tokens/s", **extra)
            rec.ratio = out.get("ratio")
            self.add(rec)

    def modernbert_work(self, work_type: str, model: str, B: int, T: int):
        """train|infer/modernbert-LxH/BxT: jaxbert's ModernBertForMaskedLM against transformers' (sdpa,
        sparse_prediction), jaxbert's init converted to transformers' by jaxbert.convert, the same tokens.
        jaxbert runs attention_impl "auto" unless --attention says otherwise (on a CPU: the blocked path,
        whose local layers cost their window). transformers runs eager only: the row measures the
        attention paths, not torch.compile's start-up on a CPU."""
        work = f"{work_type}/{model}/{B}x{T}"
        calls = 1 if self.device["platform"] == "cpu" else 10
        options = {**self.options, "attention": self.args.attention or "auto"}
        results = self._contest(work, ["jaxbert"] + self.torch_contenders[:1], calls, options)
        # both sides put the head and the loss at the labelled tokens only (sparse_prediction)
        flops_cfg = contenders.modernbert_work_config(model)
        f = contenders.masked_slots(T, contenders.MODERNBERT_MASK_RATE) / T
        per_token = forward_flops_per_token if work_type == "infer" else train_flops_per_token
        flops = per_token(flops_cfg, T, f) * B * T
        ours = results.get("jaxbert", {}).get("extra", {}).get("losses")
        for name, out in results.items():
            extra = {"attention": options["attention"]} if name == "jaxbert" else {}
            theirs = out["extra"].get("losses")
            if name != "jaxbert" and ours and theirs:
                # the honesty check: the same weights and tokens give both sides the same loss
                extra["loss_gap"] = max(abs(a - b) for a, b in zip(ours, theirs))
            extra.update(gflop_per_step=round(flops / 1e9, 1),
                         gflop_s=round(flops / statistics.median(out["seconds"]) / 1e9, 1))
            extra.update(out["extra"])
            rec = rate_record(work, name, out["seconds"], B * T, "tokens/s", **extra)
            rec.ratio = out.get("ratio")
            self.add(rec)

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

    def e2e_work(self, which: tuple[str, ...]):
        """finetune-e2e/<model> and predict/<model> (jaxbert.bench.e2e): fresh commands, alternated in
        rounds (jaxbert, transformers+PyTorch, jaxbert, ...), on one made task and source model."""
        size = e2e.size_for(self.quick)
        ft_work, pr_work = f"finetune-e2e/{size.model}", f"predict/{size.model}"
        rounds, peer = self.e2e_rounds, "torch-eager"
        with tempfile.TemporaryDirectory(prefix="jaxbert-bench-e2e-") as tmp:
            root = Path(tmp)
            task = e2e.write_task(root, size)
            src = e2e.make_tiny_model(root, task["train"]) if size.model == "tiny" else e2e.minilm_dir()
            print(f"{ft_work}: {rounds} rounds of jaxbert, {peer}; {size.n_train} train / {size.n_dev} dev "
                  f"examples, {size.epochs} epochs, batch {size.batch}, max length {size.max_length}", flush=True)
            runs = {"jaxbert": [], peer: []}
            for r, name in round_schedule(list(runs), rounds):
                out = root / f"{name}-{r}"
                try:
                    if name == "jaxbert":
                        runs[name].append(e2e.jaxbert_finetune(src, task, size, out, self.env))
                    else:
                        runs[name].append(e2e.torch_finetune(src, task, size, out, self.env))
                except RuntimeError as e:
                    print(f"  {ft_work} {name} round {r}: failed ({e})", flush=True)
            if "finetune-e2e" in which:
                self._e2e_records(ft_work, runs, lambda res: {
                    "steps": res[0]["steps"],
                    "steps_per_s": round(statistics.median(x["steps"] / x["wall_s"] for x in res), 3),
                    "dev_accuracy": _median_or_none([x["dev_accuracy"] for x in res])})
            if "predict" not in which or not runs["jaxbert"]:
                return
            best = runs["jaxbert"][0]["best_dir"]  # one model for both sides: jaxbert's exported best
            print(f"{pr_work}: {rounds} rounds of jaxbert predict, transformers pipeline; {size.n_dev} inputs",
                  flush=True)
            preds = {"jaxbert": [], peer: []}
            for r, name in round_schedule(list(preds), rounds):
                fn = e2e.jaxbert_predict if name == "jaxbert" else e2e.torch_predict
                try:
                    preds[name].append(fn(best, task["inputs"], root / f"pred-{name}-{r}.jsonl", self.env))
                except RuntimeError as e:
                    print(f"  {pr_work} {name} round {r}: failed ({e})", flush=True)
            agree = (round(e2e.agreement(preds["jaxbert"][0]["labels"], preds[peer][0]["labels"]), 4)
                     if preds["jaxbert"] and preds[peer] else None)
            self._e2e_records(pr_work, preds, lambda res: {
                "examples": len(res[0]["labels"]),
                "examples_per_s": round(statistics.median(len(x["labels"]) / x["wall_s"] for x in res), 1),
                **({} if agree is None else {"same_label_share": agree})})

    def _e2e_records(self, work: str, runs: dict[str, list[dict]], extra_of):
        per_round = {name: [x["wall_s"] for x in res] for name, res in runs.items() if res}
        ratios = ratios_for({name: {"per_round": secs} for name, secs in per_round.items()})
        for name, secs in per_round.items():
            rec = time_record(work, name, secs, **extra_of(runs[name]))
            rec.ratio = ratios.get(name)
            self.add(rec)

    def run(self):
        print(f"machine: {self.machine()}", flush=True)
        if self.wanted("roofline"):
            self.roofline_work()
        accelerator = self.device["platform"] != "cpu"
        for B, T in infer_shapes(self.quick, accelerator):
            if self.wanted(f"infer/bert-base/{B}x{T}"):
                self.model_work("infer", "bert-base", B, T)
        for model, B, T in train_shapes(self.quick, accelerator):
            if self.wanted(f"train/{model}/{B}x{T}"):
                self.model_work("train", model, B, T)
        for model, B, T in FINETUNE_SHAPES:
            if self.wanted(f"finetune/{model}/{B}x{T}"):
                self.model_work("finetune", model, B, T)
        for work_type, model, B, T in modernbert_shapes(self.quick):
            if self.wanted(f"{work_type}/{model}/{B}x{T}"):
                self.modernbert_work(work_type, model, B, T)
        for model in COMPILE_MODELS:
            if self.wanted(f"compile/{model}"):
                self.compile_work(model)
        if self.wanted("convert"):
            self.convert_work()
        model = e2e.size_for(self.quick).model
        e2e_works = tuple(w for w in ("finetune-e2e", "predict") if self.wanted(f"{w}/{model}"))
        if e2e_works and not self.args.no_torch:
            self.e2e_work(e2e_works)


COMPILE_MODELS = ("bert-base", "bert-large")
# Sequence classification fine-tuning at GLUE's batch and length (finetune-glue: 32 x 128).
FINETUNE_SHAPES = (("bert-base", 32, 128),)


# Shapes that fill an accelerator (GPU, TPU) and would take minutes per step on a CPU: run only there.
ACCELERATOR_INFER_SHAPES = ((256, 128),)
ACCELERATOR_TRAIN_SHAPES = (("bert-base", 256, 128),)


def infer_shapes(quick: bool, accelerator: bool = True) -> list[tuple[int, int]]:
    return ([(8, 128)] + ([] if quick else [(32, 128), (8, 512)])
            + (list(ACCELERATOR_INFER_SHAPES) if accelerator else []))


def train_shapes(quick: bool, accelerator: bool = True) -> list[tuple[str, int, int]]:
    return ([("bert-small", 16, 128), ("bert-base", 8, 128)] + ([] if quick else [("bert-base", 4, 512)])
            + (list(ACCELERATOR_TRAIN_SHAPES) if accelerator else []))


# ModernBERT against transformers' (Bench.modernbert_work): a 6-layer, hidden-384 one at pretraining's
# 8 x 512 and at long sequences (2048, 4096), where the local layers' window is a small share of T.
# The -v32768 row: the same model on a 32k vocabulary, where the MLM head is a smaller share of the step.
MODERNBERT_SHAPES = (("modernbert-6x384", 8, 512), ("modernbert-6x384", 1, 2048), ("modernbert-6x384", 1, 4096),
                     ("modernbert-6x384-v32768", 8, 512))


def modernbert_shapes(quick: bool) -> list[tuple[str, str, int, int]]:
    """(work type, model, B, T) of the ModernBERT rows: train and infer at every shape (--quick: the first)."""
    shapes = MODERNBERT_SHAPES[:1] if quick else MODERNBERT_SHAPES
    return [(w, m, B, T) for m, B, T in shapes for w in ("train", "infer")]


def work_names(quick: bool) -> list[str]:
    """Every work Bench.run times (with --quick: fewer; the accelerator shapes only on one)."""
    return (["roofline"] + [f"infer/bert-base/{B}x{T}" for B, T in infer_shapes(quick)]
            + [f"train/{m}/{B}x{T}" for m, B, T in train_shapes(quick)]
            + [f"finetune/{m}/{B}x{T}" for m, B, T in FINETUNE_SHAPES]
            + [f"{w}/{m}/{B}x{T}" for w, m, B, T in modernbert_shapes(quick)]
            + [f"compile/{m}/{layout}" for m in COMPILE_MODELS for layout in ("scan", "unscanned")]
            + ["convert/bert-base", f"finetune-e2e/{e2e.size_for(quick).model}",
               f"predict/{e2e.size_for(quick).model}"])


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
    if getattr(args, "rounds", None):
        parts.append(f"--rounds {args.rounds}")
    if getattr(args, "e2e_rounds", None):
        parts.append(f"--e2e-rounds {args.e2e_rounds}")
    if args.only:
        parts.append("--only " + " ".join(args.only))
    return " ".join(parts)
