"""Multi-host runs on gs:// (2 processes x 2 CPU devices, FSDP, a GCS emulator on 127.0.0.1):
a run killed after a checkpoint, or SIGTERMed on one host, resumes to the losses of an
uninterrupted run bit for bit; two hosts given two different local workdirs stop at start."""

from __future__ import annotations

import json
import signal
import socket
import time

import pytest


from tests.helpers.runs import child_env, train_child, write_recipe

STEPS = 12


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(recipe, workdir: str, env: dict, delay: float = 0.0, extra=()) -> list:
    port = _port()
    return [train_child(["--config", str(recipe), "--workdir", workdir, "--coordinator", f"127.0.0.1:{port}",
                         "--num-processes", "2", "--process-id", str(i), "--set", "parallel.fsdp=true", *extra],
                        env, delay) for i in range(2)]


def _finish(hosts, timeout: float = 400) -> list[str]:
    outs = [h.communicate(timeout=timeout)[0] for h in hosts]
    return outs


def _losses(gcs, workdir: str) -> dict[int, float]:
    """step -> loss from metrics.jsonl in the bucket; a step logged twice (before a kill and after the
    restart) must have logged the same loss both times."""
    out: dict[int, float] = {}
    for line in gcs.fs().cat_file(workdir[5:] + "/metrics.jsonl").decode().splitlines():
        row = json.loads(line)
        if "loss" in row:
            assert out.setdefault(row["step"], row["loss"]) == row["loss"], f"step {row['step']} differs"
    return out


def _committed(gcs, workdir: str, step: int) -> bool:
    return gcs.fs().exists(f"{workdir[5:]}/checkpoints/{step}/commit_success.txt")


def _wait_for_checkpoint(gcs, workdir: str, step: int, hosts, limit: float = 400) -> None:
    t0 = time.time()
    while not _committed(gcs, workdir, step):
        if any(h.poll() is not None for h in hosts):
            for h in hosts:
                h.kill()
            pytest.fail("a host stopped before the checkpoint:\n" + "\n---\n".join(h.communicate()[0] for h in hosts))
        assert time.time() - t0 < limit, "no checkpoint in time"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def setup(gcs, tmp_path_factory):
    root = tmp_path_factory.mktemp("pod")
    recipe = write_recipe(root / "tiny.yaml", train={"steps": STEPS, "per_device_batch_size": 2, "eval_every": 0,
                                                      "eval_batches": 1},
                          checkpoint={"every_steps": 4, "keep": 5})
    env = child_env(root / "jit-cache", devices=2)
    ref = gcs.url("ref")
    hosts = _start(recipe, ref, env)
    outs = _finish(hosts)
    assert [h.returncode for h in hosts] == [0, 0], outs
    losses = _losses(gcs, ref)
    assert sorted(losses) == list(range(1, STEPS + 1))
    return recipe, env, losses


def test_sigkill_after_a_checkpoint_then_restart_gives_the_same_losses(gcs, setup):
    recipe, env, reference = setup
    wd = gcs.url("killed")
    hosts = _start(recipe, wd, env, delay=0.4)
    _wait_for_checkpoint(gcs, wd, 4, hosts)
    for h in hosts:
        h.send_signal(signal.SIGKILL)
    _finish(hosts)
    assert not _committed(gcs, wd, STEPS)
    hosts = _start(recipe, wd, env)
    outs = _finish(hosts)
    assert [h.returncode for h in hosts] == [0, 0], outs
    assert "resumed from" in outs[0]
    assert _losses(gcs, wd) == reference  # every step, to the last bit


def test_sigterm_to_one_host_saves_on_all_then_exits_0_and_resumes(gcs, setup):
    recipe, env, reference = setup
    wd = gcs.url("preempted")
    hosts = _start(recipe, wd, env, delay=0.4)
    _wait_for_checkpoint(gcs, wd, 4, hosts)
    hosts[1].send_signal(signal.SIGTERM)  # one host is preempted; the other hears of it at the next step
    outs = _finish(hosts)
    assert [h.returncode for h in hosts] == [0, 0], outs
    assert "SIGTERM: saved step" in outs[0], outs[0]
    saved = int(outs[0].split("SIGTERM: saved step ", 1)[1].split()[0])
    assert 4 < saved < STEPS and _committed(gcs, wd, saved)
    hosts = _start(recipe, wd, env)
    outs = _finish(hosts)
    assert [h.returncode for h in hosts] == [0, 0], outs
    assert f"checkpoints/{saved}" in outs[0]  # resumed from the coordinated save
    assert _losses(gcs, wd) == reference


def test_two_hosts_with_two_local_workdirs_stop_at_start(tmp_path):
    recipe = write_recipe(tmp_path / "tiny.yaml")
    port = _port()
    env = child_env(devices=1)
    hosts = [train_child(["--config", str(recipe), "--workdir", str(tmp_path / f"host{i}"), "--coordinator",
                          f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)], env)
             for i in range(2)]
    outs = _finish(hosts, timeout=200)
    assert [h.returncode for h in hosts] == [2, 2], outs
    for out in outs:
        assert "is not shared between the hosts" in out and "process(es) [1]" in out, out
        assert "Traceback" not in out
    assert not (tmp_path / "host0" / "checkpoints").exists()
