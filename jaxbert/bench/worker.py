"""One contender on one work, alone in its interpreter: `python -m jaxbert.bench.worker SPEC`.

SPEC is a JSON object {"work", "contender", "repeats", "options"}. The worker
builds the work, runs it once or twice to warm up, times ``repeats`` calls
(idling ``pause`` seconds before each), and prints one JSON line
{"seconds": [...], "extra": {...}} as the last line of its stdout.

Why a process each: with jaxbert and PyTorch in one process, their thread pools
and allocators get in each other's way when steps alternate, so in-process
interleaving would measure the interference, not the frameworks.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp

from jaxbert.bench import contenders
from jaxbert.bench.target import run_aot_work
from jaxbert.model.config import preset
from jaxbert.train.allocator import keep_freed_memory

MODELS = {"bert-base": "bert-base-uncased", "bert-small": "bert-small", "bert-large": "bert-large-uncased"}


def _config(model: str):
    return contenders.no_dropout(preset(MODELS.get(model, model)))


def _jax_options(options: dict) -> dict:
    return dict(attention_impl=options.get("attention", "einsum"),
                dtype=jnp.bfloat16 if options.get("dtype") == "bfloat16" else jnp.float32)


def build(work: str, contender: str, options: dict):
    """(fn, extra_fn): fn runs one unit of the work and blocks; extra_fn() -> dict after timing."""
    work_type, *rest = work.split("/")
    no_extra = dict
    if work_type == "roofline":
        n = 2048
        return (contenders.jax_matmul(n) if contender == "jaxbert"
                else contenders.torch_matmul(n, options.get("platform", "cpu"))), no_extra
    model, shape = rest
    B, T = (int(v) for v in shape.split("x"))
    cfg = _config(model)
    if work_type == "finetune":
        if contender == "jaxbert":
            fn, compiles = contenders.jax_finetune(cfg, B, T, **_jax_options(options))
            # one shape, one compile: a second would mean a recompile after warm-up
            return fn, lambda: {"compiles": compiles()}
        return contenders.torch_finetune(cfg, B, T, compile_=contender == "torch-compile"), no_extra
    if contender == "jaxbert":
        builder = {"infer": contenders.jax_forward, "train": contenders.jax_train}[work_type]
        fn = builder(cfg, B, T, **_jax_options(options))

        def extra():
            peak = contenders.jax_peak_memory()
            return {} if peak is None else {"peak_memory_mb": round(peak)}
        return fn, extra
    builder = {"infer": contenders.torch_forward, "train": contenders.torch_train}[work_type]
    platform = options.get("platform", "cpu")  # the harness's device: on a GPU the contender runs on CUDA
    settings = contenders.torch_settings(platform, contender == "torch-compile")

    def torch_extra():
        peak = contenders.torch_peak_memory(settings)
        return {} if peak is None else {"peak_memory_mb": round(peak)}
    return builder(cfg, B, T, compile_=contender == "torch-compile", platform=platform), torch_extra


def compile_seconds(work: str, options: dict) -> float:
    """compile/<model>/<scan|unscanned>: lower and compile the train step once, in a fresh process."""
    _, model, layout = work.split("/")
    return contenders.jax_compile_seconds(_config(model), 8, 128, scan_layers=layout == "scan",
                                     **_jax_options(options))


def describe_device() -> dict:
    dev = jax.devices()[0]
    return {"platform": dev.platform, "device_kind": dev.device_kind, "jax": jax.__version__}


def run(spec: dict) -> dict:
    work, contender, repeats = spec["work"], spec["contender"], spec["repeats"]
    options, pause = spec.get("options", {}), spec.get("pause", 0.5)
    if work == "device":
        return {"seconds": [], "extra": describe_device()}
    if work.startswith(("aot/", "aot-max/")):
        return run_aot_work(work, contender, options["target"])
    if work.startswith("compile/"):
        return {"seconds": [compile_seconds(work, options)], "extra": {}}
    if options.get("malloc") == "keep":  # what `jaxbert train` does at start, for every contender
        keep_freed_memory()
    fn, extra = build(work, contender, options)
    for _ in range(spec.get("warmup", 2)):
        fn()
    seconds = []
    before = _rusage()
    for _ in range(repeats):
        time.sleep(pause)  # let the previous call's spinning worker threads go idle
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
    after = _rusage()
    out = extra()
    if before and after and repeats:
        # Fresh pages touched and kernel time per call: what a caching allocator saves.
        out["page_faults_mb_per_call"] = round((after[0] - before[0]) * 4096 / 2**20 / repeats)
        out["sys_s_per_call"] = round((after[1] - before[1]) / repeats, 3)
    return {"seconds": seconds, "extra": out}


def _rusage() -> tuple[int, float] | None:
    """(minor page faults, system CPU seconds) of this process so far; None off Unix."""
    try:
        import resource
    except ImportError:
        return None
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_stime


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m jaxbert.bench.worker SPEC_JSON", file=sys.stderr)
        return 2
    result = run(json.loads(argv[0]))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
