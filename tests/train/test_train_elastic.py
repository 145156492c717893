"""Elastic resume: a run resumed with another batch size, device count or process count continues
the shuffled stream at the same sequence and sees what an uninterrupted run sees.

Each run is a child process of a 1-layer model on a small prepared dataset (fewer rows than the
runs read, so the stream crosses an epoch); the children record the stream positions they read
(tests/helpers/runs.py SEEN_TRAIN), and a checkpoint's loader state says where the trained steps end.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from tests.helpers.runs import child_env, loader_position, run_seen, seen_child, seen_positions, write_recipe

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["##s", "##ing", "."]
TOTAL = 64  # sequences every run here reads: 8 steps of 8, or 4 of 8 then 8 of 4, ...


def _corpus(path, n_docs):
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(VOCAB[5:31], int(rng.integers(4, 12)))) + " ." for _ in range(n_docs)]
    path.write_text("\n\n".join(docs) + "\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from jaxbert.data.prepare import prepare
    root = tmp_path_factory.mktemp("elastic")
    (root / "tok").mkdir()
    (root / "tok" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    _corpus(root / "c.txt", 90)
    meta = prepare([str(root / "c.txt")], str(root / "tok" / "vocab.txt"), str(root / "data"), max_length=16,
                   validation_fraction=0.3, progress=False)
    n = meta["splits"]["train"]["examples"]
    assert TOTAL // 2 < n < TOTAL, n  # the second half of every run crosses into the second epoch
    recipe = write_recipe(root / "tiny.yaml", data={"source": "prepared", "dir": str(root / "data"), "seq_len": 16,
                                                    "mask_rate": 0.25},
                          train={"steps": 8, "per_device_batch_size": 8, "eval_every": 0, "eval_batches": 1},
                          checkpoint={"every_steps": 4, "keep": 5})
    env = child_env(cache_dir=root / "jax-cache")
    ref = root / "reference"
    run_seen(root / "seen-reference", ["--config", str(recipe), "--workdir", str(ref)], env)
    assert loader_position(ref, 8) == TOTAL
    reference = seen_positions(root / "seen-reference", TOTAL)
    assert sorted(reference) == list(range(TOTAL))
    assert sorted(i for i, e in reference.values() if e == 0) == list(range(n))  # epoch 0: each row once
    return {"root": root, "recipe": recipe, "env": env, "reference": reference, "n": n}


def _seen_across(first_record, second_record, workdir, cut: int, end: int) -> dict:
    """The stream positions trained by a run stopped at step `cut` and resumed to step `end`."""
    middle, last = loader_position(workdir, cut), loader_position(workdir, end)
    seen = seen_positions(first_record, middle)
    seen.update(seen_positions(second_record, last, above=middle))
    return seen


def test_resume_with_half_the_batch_sees_the_sequences_of_an_uninterruptedrun_seen(setup, tmp_path):
    args = ["--config", str(setup["recipe"]), "--workdir", str(tmp_path / "wd")]
    run_seen(tmp_path / "seen-1", args + ["--set", "train.steps=4"], setup["env"])
    out = run_seen(tmp_path / "seen-2", args + ["--set", "train.steps=12", "--set", "train.per_device_batch_size=4"],
               setup["env"])
    assert "resumed from" in out and "global batch 4" in out, out
    assert loader_position(tmp_path / "wd", 4) == 32 and loader_position(tmp_path / "wd", 12) == TOTAL
    assert _seen_across(tmp_path / "seen-1", tmp_path / "seen-2", tmp_path / "wd", 4, 12) == setup["reference"]


def test_resume_with_another_seed_is_refused_by_name(setup, tmp_path):
    args = ["--config", str(setup["recipe"]), "--workdir", str(tmp_path / "wd")]
    run_seen(tmp_path / "seen-1", args + ["--set", "train.steps=4"], setup["env"])
    recipe = (tmp_path / "wd" / "recipe.yaml").read_text()
    proc = seen_child(tmp_path / "seen-2", args + ["--set", "train.steps=8", "--set", "train.seed=1"], setup["env"])
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, out
    assert "train.seed: 0 in the checkpoint, 1 now" in out and "Traceback" not in out, out
    assert (tmp_path / "wd" / "recipe.yaml").read_text() == recipe


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(record, argv, env, timeout=400):
    port = _port()
    procs = [seen_child(record, argv + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                                        "--process-id", str(i)], env) for i in range(2)]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return outs[0]


@pytest.mark.slow  # 60-85 s each on 2 shared cores: two processes start, compile and meet
@pytest.mark.parametrize("order", ["2x2-then-1x2", "1x2-then-2x2"])
def test_resume_on_another_process_count_sees_the_sequences_of_an_uninterruptedrun_seen(setup, tmp_path, order):
    # 2 processes x 2 devices x 2 rows = 8 a step; 1 process x 2 devices x 2 rows = 4 a step: TOTAL either way
    env = child_env(cache_dir=setup["root"] / "jax-cache-2dev", devices=2)
    args = ["--config", str(setup["recipe"]), "--workdir", str(tmp_path / "wd"),
            "--set", "train.per_device_batch_size=2"]
    if order == "2x2-then-1x2":
        _two_processes(tmp_path / "seen-1", args + ["--set", "train.steps=4"], env)
        out = run_seen(tmp_path / "seen-2", args + ["--set", "train.steps=12"], env)
        cut = 4
    else:
        run_seen(tmp_path / "seen-1", args + ["--set", "train.steps=8"], env)
        out = _two_processes(tmp_path / "seen-2", args + ["--set", "train.steps=12"], env)
        cut = 8
    assert "resumed from" in out, out
    assert loader_position(tmp_path / "wd", cut) == 32 and loader_position(tmp_path / "wd", 12) == TOTAL
    assert _seen_across(tmp_path / "seen-1", tmp_path / "seen-2", tmp_path / "wd", cut, 12) == setup["reference"]


def test_the_synthetic_source_resumes_at_the_same_example_under_another_split():
    from jaxbert.train.sources import SyntheticMLM
    first = SyntheticMLM(64, 8, 16, seed=2)
    got = [next(first) for _ in range(3)]
    hosts = [SyntheticMLM(64, 2, 16, seed=2, process_index=p, process_count=2) for p in range(2)]
    for h in hosts:
        h.restore(first.state())
    for _ in range(4):  # 2 hosts x 2 rows a step
        parts = [next(h) for h in hosts]
        got.append({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    straight = SyntheticMLM(64, 40, 16, seed=2)
    want = next(straight)
    for k in want:
        np.testing.assert_array_equal(np.concatenate([g[k] for g in got]), want[k])
    assert hosts[0].state() == hosts[1].state() == {"position": 40, "seed": 2}
