"""The benchmark harness: FLOPs arithmetic, records and table, one worker per contender."""

import json
import subprocess
import sys

import pytest

from jaxbert.bench import harness, worker
from jaxbert import devices
from jaxbert.model import flops
from jaxbert.bench.timing import markdown_table, rate_record, time_record
from jaxbert.model.configs import preset


def test_train_flops_count_the_masked_head_share():
    cfg = preset("bert-base-uncased")
    H, I, V, L, T = 768, 3072, 30522, 12, 128
    encoder = 6 * L * (4 * H * H + 2 * H * I) + 12 * L * H * T
    head = 6 * (H * V + H * H)
    assert flops.train_flops_per_token(cfg, T) == encoder + head
    assert flops.train_flops_per_token(cfg, T, 20 / 128) == pytest.approx(encoder + head * 20 / 128)
    assert flops.forward_flops_per_token(cfg, T) == pytest.approx((encoder + head) / 3)
    # 8x128 with 20 masked slots per sequence: ~559 GFLOP per step, as the README table reports.
    assert flops.train_flops_per_token(cfg, T, 20 / 128) * 8 * T / 1e9 == pytest.approx(559.4, abs=0.1)
    assert devices.peak_flops("NVIDIA H100 80GB HBM3") == 989e12 and devices.peak_flops("cpu") is None


def test_records_and_ratios():
    ours = rate_record("train/x", "jaxbert", [2.0, 1.0, 4.0], 100, "tokens/s")
    assert (ours.median, ours.min, ours.max) == (50.0, 25.0, 100.0)
    peer = rate_record("train/x", "torch-eager", [4.0, 4.0, 4.0], 100, "tokens/s")
    fast = time_record("compile/x", "jaxbert", [1.0, 3.0])
    slow = time_record("compile/x", "torch-eager", [4.0])
    table = markdown_table([ours, peer, fast, slow])
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in table.splitlines()[2:]}
    assert "| 2.00x |" in rows[("train/x", "torch-eager")]  # rates: ours / peer
    assert "| 2.00x |" in rows[("compile/x", "torch-eager")]  # times: peer / ours
    assert json.loads(json.dumps(ours.to_json()))["unit"] == "tokens/s"


@pytest.mark.parametrize("contender", ["jaxbert", "torch-eager"])
def test_worker_times_a_train_step(contender):
    pytest.importorskip("torch")
    spec = {"work": "train/bert-tiny/2x16", "contender": contender, "repeats": 2, "pause": 0.0, "warmup": 1}
    out = worker.run(spec)
    assert len(out["seconds"]) == 2 and all(s > 0 for s in out["seconds"])  # no bound: tests time nothing
    assert out["extra"]["page_faults_mb_per_call"] >= 0 and out["extra"]["sys_s_per_call"] >= 0


@pytest.mark.parametrize("contender", ["jaxbert", "torch-eager"])
def test_worker_times_a_finetune_step_without_recompiling(contender):
    pytest.importorskip("torch")
    spec = {"work": "finetune/bert-tiny/2x16", "contender": contender, "repeats": 2, "pause": 0.0, "warmup": 1}
    out = worker.run(spec)
    assert len(out["seconds"]) == 2 and all(s > 0 for s in out["seconds"])
    if contender == "jaxbert":  # one shape: compiled once, over the warm-up and the timed calls
        assert out["extra"]["compiles"] == 1
    assert "finetune/bert-base/32x128" in harness.work_names(quick=True)


def test_bench_cli_writes_records(tmp_path):
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, "-m", "jaxbert.cli.main", "bench", "--only", "roofline", "--no-torch",
                           "--rounds", "2", "--json", str(out), "--markdown", str(md)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads(out.read_text())
    assert [(r["work"], r["contender"], r["unit"]) for r in records] == [("roofline", "jaxbert", "GFLOP/s")]
    r = records[0]
    assert 0 < r["min"] <= r["median"] <= r["max"]
    assert "cores" in r["machine"] and "jax " in r["machine"]  # every row names its machine
    assert "jaxbert bench --no-torch --rounds 2 --only roofline" in md.read_text()
    assert proc.stdout.startswith("machine: ")  # the machine line comes first


# ---- the GPU path, checked on the CPU -----------------------------------------------------------

def _bench_args(**kw):
    import argparse
    base = dict(quick=True, repeats=2, rounds=2, e2e_rounds=None, dtype=None, attention=None, malloc="keep",
                no_torch=False, only=None)
    return argparse.Namespace(**{**base, **kw})


class _FakeWarm:
    """A warm worker whose every call 'took' the seconds it was made with; it logs each call."""

    def __init__(self, spec, log, seconds=0.5, extra=None):
        self.spec, self.log, self.seconds, self.extra = spec, log, seconds, extra or {}

    def time(self, calls):
        self.log.append(self.spec["contender"])
        return [self.seconds] * calls

    def finish(self):
        return dict(self.extra)

    def close(self):
        pass


def _fake_workers(monkeypatch, platform, device_kind):
    from jaxbert.bench import harness
    specs = []

    def fake(spec, env=None):
        specs.append(spec)
        return {"seconds": [], "extra": {"platform": platform, "device_kind": device_kind, "jax": "0"}}

    def fake_start(spec, env=None):
        specs.append(spec)
        return _FakeWarm(spec, [], 0.5, {"peak_memory_mb": 1234})
    monkeypatch.setattr(harness, "run_worker", fake)
    monkeypatch.setattr(harness, "start_worker", fake_start)
    return specs


def test_the_bench_takes_its_gpu_branch_from_the_platform(monkeypatch):
    from jaxbert.bench import harness
    specs = _fake_workers(monkeypatch, "gpu", "NVIDIA H100 80GB HBM3")
    bench = harness.Bench(_bench_args())
    assert bench.options == {"dtype": "bfloat16", "attention": "dot_product", "platform": "gpu", "malloc": "keep"}
    assert bench.torch_contenders == ["torch-eager", "torch-compile"]  # torch.compile even with --quick
    bench.model_work("train", "bert-base", 8, 128)
    assert [s["contender"] for s in specs[1:]] == ["jaxbert", "torch-eager", "torch-compile"]
    assert all(s["options"]["platform"] == "gpu" and s["options"]["dtype"] == "bfloat16" for s in specs[1:])
    cfg = preset("bert-base-uncased")
    for r in bench.records:  # MFU for every contender, each on its own FLOPs, and the peak memory beside
        f = 20 / 128 if r.contender == "jaxbert" else 1.0
        per_token = flops.train_flops_per_token(cfg, 128, f)
        assert r.extra["mfu"] == round(8 * 128 / 0.5 * per_token / 989e12, 3)
        assert r.extra["peak_memory_mb"] == 1234
    # an explicit choice wins over the GPU's defaults
    assert harness.Bench(_bench_args(dtype="float32", attention="einsum")).options["dtype"] == "float32"


def test_on_the_cpu_the_bench_keeps_fp32_einsum_and_no_mfu_for_torch(monkeypatch):
    from jaxbert.bench import harness
    _fake_workers(monkeypatch, "cpu", "cpu")
    bench = harness.Bench(_bench_args())
    assert bench.options == {"dtype": "float32", "attention": "einsum", "platform": "cpu", "malloc": "keep"}
    assert bench.torch_contenders == ["torch-eager"]
    bench.model_work("train", "bert-base", 8, 128)
    assert all("mfu" not in r.extra for r in bench.records)  # no known peak for a CPU


def test_mfu_arithmetic():
    from jaxbert.bench.harness import mfu
    assert mfu(1000.0, 5e8, 1e12) == pytest.approx(0.5)  # tokens/s x FLOPs per token / peak
    cfg = preset("bert-base-uncased")
    per_token = flops.train_flops_per_token(cfg, 128, 20 / 128)
    assert mfu(400_000, per_token, devices.peak_flops("NVIDIA A100-SXM4-80GB")) == pytest.approx(
        400_000 * per_token / 312e12)


@pytest.mark.parametrize("platform,kind", [("gpu", "NVIDIA H100 80GB HBM3"), ("cpu", "cpu")])
def test_the_accelerator_shapes_run_only_on_an_accelerator(monkeypatch, platform, kind):
    """bert-base at 256 x 128 (the GPU rows) would take minutes a step on a CPU; the contenders' processes
    share one GPU, so jax must not preallocate most of its memory."""
    from jaxbert.bench import harness
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    specs = _fake_workers(monkeypatch, platform, kind)
    bench = harness.Bench(_bench_args(only=["train/bert-base", "infer/bert-base"]))
    bench.run()
    works = {s["work"] for s in specs[1:]}
    big = {"train/bert-base/256x128", "infer/bert-base/256x128"}
    assert big <= works if platform == "gpu" else not big & works
    assert "train/bert-base/8x128" in works
    assert bench.env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert big <= set(harness.work_names(quick=True))  # --only accepts them before the platform is known


def test_the_pytorch_contender_on_a_gpu_is_built_as_its_users_run_it():
    from jaxbert.bench import contenders
    gpu = contenders.torch_settings("gpu", compile_=True)
    assert gpu == {"device": "cuda", "autocast_dtype": "bfloat16", "attn_implementation": "sdpa",
                   "fused_adamw": True, "compile": True}
    assert contenders.adamw_kwargs(gpu) == {"lr": 1e-4, "weight_decay": 0.01, "fused": True}
    cpu = contenders.torch_settings("cpu")
    assert cpu == {"device": "cpu", "autocast_dtype": None, "attn_implementation": "sdpa", "fused_adamw": False,
                   "compile": False}
    assert "fused" not in contenders.adamw_kwargs(cpu)
    torch = pytest.importorskip("torch")
    import warnings
    with warnings.catch_warnings():  # without CUDA torch warns that it disables the context: it is built anyway
        warnings.simplefilter("ignore")
        ctx = contenders.torch_autocast(gpu)
    assert isinstance(ctx, torch.autocast) and ctx.device == "cuda" and ctx.fast_dtype == torch.bfloat16


def test_the_worker_hands_the_platform_to_the_pytorch_contender(monkeypatch):
    from jaxbert.bench import contenders
    built = []
    monkeypatch.setattr(contenders, "torch_train", lambda cfg, B, T, **kw: built.append(kw) or (lambda: None))
    # torch.cuda.max_memory_allocated is read where the contender ran on CUDA
    monkeypatch.setattr(contenders, "torch_peak_memory", lambda s: 321.4 if s["device"] == "cuda" else None)
    fn, extra = worker.build("train/bert-tiny/2x16", "torch-compile", {"platform": "gpu"})
    assert built == [{"compile_": True, "platform": "gpu"}] and extra() == {"peak_memory_mb": 321}
    fn, extra = worker.build("train/bert-tiny/2x16", "torch-eager", {})
    assert built[-1] == {"compile_": False, "platform": "cpu"} and extra() == {}


@pytest.mark.parametrize("name", ["bert-base-phase1-1gpu", "bert-base-phase1-8gpu"])
def test_gpu_recipes_say_bf16_dot_product_and_no_remat(name):
    from pathlib import Path
    from jaxbert.train import recipe as recipes
    r = recipes.load(str(Path(__file__).parents[2] / "configs" / "train" / f"{name}.yaml"))
    assert (r.model.dtype, r.model.param_dtype, r.model.attention_impl, r.model.remat_policy) == (
        "bfloat16", "float32", "dot_product", "none")
    assert (r.train.per_device_batch_size, r.data.seq_len) == (256, 128)
