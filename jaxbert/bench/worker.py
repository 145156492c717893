"""One contender on one work, alone in its interpreter: `python -m jaxbert.bench.worker SPEC`.

SPEC is a JSON object {"work", "contender", "repeats", "options"}. The worker
builds the work, runs it once or twice to warm up, times ``repeats`` calls
(idling ``pause`` seconds before each), and prints one JSON line
{"seconds": [...], "extra": {...}} as the last line of its stdout.

`python -m jaxbert.bench.worker --serve SPEC` keeps the work warm for rounds: it
builds and warms up, prints a line READY, then answers each line on stdin:
"time K" times K calls and prints {"seconds": [...]}; "finish" prints
{"extra": {...}} (page faults and system time per timed call over all rounds)
and exits. Every answer is one stdout line starting with REPLY_PREFIX, so
libraries that print to stdout cannot be mistaken for it. The harness keeps one
such process per contender and alternates them, round by round.

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
from jaxbert.model.configs import preset
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
    if contenders.modernbert_model(model) is not None:
        return _modernbert(work_type, model, B, T, contender, options)
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


def _modernbert(work_type: str, model: str, B: int, T: int, contender: str, options: dict):
    """train|infer/modernbert-LxH/BxT: ModernBertForMaskedLM on both sides, the same weights and tokens;
    the extras carry each side's first losses, which must agree."""
    cfg = contenders.modernbert_work_config(model)
    train = work_type == "train"
    if contender == "jaxbert":
        probe = contenders.jax_modernbert(cfg, B, T, train, **_jax_options(options))
        memory = contenders.jax_peak_memory
    else:
        settings = contenders.torch_settings(options.get("platform", "cpu"))
        probe = contenders.torch_modernbert(cfg, B, T, train, platform=options.get("platform", "cpu"))
        memory = lambda: contenders.torch_peak_memory(settings)  # noqa: E731

    def extra():
        peak = memory()
        return {"losses": probe.losses, **({} if peak is None else {"peak_memory_mb": round(peak)})}
    return probe, extra


def compile_seconds(work: str, options: dict) -> float:
    """compile/<model>/<scan|unscanned>: lower and compile the train step once, in a fresh process."""
    _, model, layout = work.split("/")
    return contenders.jax_compile_seconds(_config(model), 8, 128, scan_layers=layout == "scan",
                                     **_jax_options(options))


def describe_device() -> dict:
    dev = jax.devices()[0]
    return {"platform": dev.platform, "device_kind": dev.device_kind, "jax": jax.__version__}


REPLY_PREFIX = "@@bench "


class Warm:
    """A built, warmed-up work: time(k) calls it k times; extra() after the last round."""

    def __init__(self, spec: dict):
        options = spec.get("options", {})
        self.pause = spec.get("pause", 0.5)
        if options.get("malloc") == "keep":  # what `jaxbert train` does at start, for every contender
            keep_freed_memory()
        self.fn, self._extra = build(spec["work"], spec["contender"], options)
        for _ in range(spec.get("warmup", 2)):
            self.fn()
        self.calls = 0
        self.before = _rusage()

    def time(self, k: int) -> list[float]:
        seconds = []
        for _ in range(k):
            time.sleep(self.pause)  # let the previous call's spinning worker threads go idle
            t0 = time.perf_counter()
            self.fn()
            seconds.append(time.perf_counter() - t0)
        self.calls += k
        return seconds

    def extra(self) -> dict:
        after = _rusage()
        out = self._extra()
        if self.before and after and self.calls:
            # Fresh pages touched and kernel time per call: what a caching allocator saves.
            out["page_faults_mb_per_call"] = round((after[0] - self.before[0]) * 4096 / 2**20 / self.calls)
            out["sys_s_per_call"] = round((after[1] - self.before[1]) / self.calls, 3)
        return out


def serve(spec: dict, lines=None, reply=None) -> None:
    """The --serve loop over `lines` (default stdin), answering through `reply` (default stdout)."""
    lines = sys.stdin if lines is None else lines
    reply = reply or (lambda obj: print(REPLY_PREFIX + json.dumps(obj), flush=True))
    warm = Warm(spec)
    reply({"ready": True})
    for line in lines:
        verb, *rest = line.split() or [""]
        if verb == "time":
            reply({"seconds": warm.time(int(rest[0]) if rest else 1)})
        elif verb == "finish":
            reply({"extra": warm.extra()})
            return


def run(spec: dict) -> dict:
    work, contender, repeats = spec["work"], spec["contender"], spec["repeats"]
    options = spec.get("options", {})
    if work == "device":
        return {"seconds": [], "extra": describe_device()}
    if work.startswith(("aot/", "aot-max/")):
        return run_aot_work(work, contender, options["target"])
    if work.startswith("compile/"):
        return {"seconds": [compile_seconds(work, options)], "extra": {}}
    warm = Warm(spec)
    seconds = warm.time(repeats)
    return {"seconds": seconds, "extra": warm.extra()}


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
    if len(argv) == 2 and argv[0] == "--serve":
        serve(json.loads(argv[1]))
        return 0
    if len(argv) != 1:
        print("usage: python -m jaxbert.bench.worker [--serve] SPEC_JSON", file=sys.stderr)
        return 2
    result = run(json.loads(argv[0]))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
