"""The benchmark harness: FLOPs arithmetic, records and table, one worker per contender."""

import json
import subprocess
import sys

import pytest

from jaxbert.bench import harness, worker
from jaxbert import devices
from jaxbert.model import flops
from jaxbert.bench.timing import markdown_table, rate_record, time_record
from jaxbert.model.config import preset


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
    assert len(out["seconds"]) == 2 and all(0 < s < 60 for s in out["seconds"])
    assert out["extra"]["page_faults_mb_per_call"] >= 0 and out["extra"]["sys_s_per_call"] >= 0


@pytest.mark.parametrize("contender", ["jaxbert", "torch-eager"])
def test_worker_times_a_finetune_step_without_recompiling(contender):
    pytest.importorskip("torch")
    spec = {"work": "finetune/bert-tiny/2x16", "contender": contender, "repeats": 2, "pause": 0.0, "warmup": 1}
    out = worker.run(spec)
    assert len(out["seconds"]) == 2 and all(0 < s < 60 for s in out["seconds"])
    if contender == "jaxbert":  # one shape: compiled once, over the warm-up and the timed calls
        assert out["extra"]["compiles"] == 1
    assert "finetune/bert-base/32x128" in harness.work_names(quick=True)


def test_bench_cli_writes_records(tmp_path):
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, "-m", "jaxbert.cli.main", "bench", "--only", "roofline", "--no-torch",
                           "--repeats", "2", "--json", str(out), "--markdown", str(md)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads(out.read_text())
    assert [(r["work"], r["contender"], r["unit"]) for r in records] == [("roofline", "jaxbert", "GFLOP/s")]
    r = records[0]
    assert 0 < r["min"] <= r["median"] <= r["max"]
    assert "jaxbert bench --no-torch --only roofline" in md.read_text()
