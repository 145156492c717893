"""Helpers shared by the tests/test_train*.py modules: a 1-layer recipe and child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]

# A 1-layer model on the synthetic source: its sequences are arithmetic progressions, so a
# masked token is predictable from its neighbours and the loss can fall within a few steps.
TINY = {
    "name": "tiny-test",
    "model": {"preset": "bert-tiny", "config": {
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "vocab_size": 64, "max_position_embeddings": 32,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}},
    "data": {"source": "synthetic", "seq_len": 16, "mask_rate": 0.25},
    "optim": {"learning_rate": 1e-2, "warmup_steps": 2, "schedule": "linear"},
    "train": {"steps": 12, "per_device_batch_size": 8, "log_every": 1, "eval_every": 0, "eval_batches": 2},
    "checkpoint": {"every_steps": 4, "keep": 5},
    "outputs": {"plot": False},
}


def write_recipe(path: Path, **sections) -> Path:
    """TINY with sections updated key by key, e.g. train={"steps": 20}."""
    data = json.loads(json.dumps(TINY))
    for section, values in sections.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    path.write_text(yaml.safe_dump(data))
    return path


def child_env(cache_dir: Path | None = None, devices: int | None = None) -> dict:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    # With JAXBERT_TEST_COMPILE_CACHE=on the run's persistent compilation cache (tests/conftest.py) is in
    # os.environ already and the children share it; without it (the default), CACHE_DIR is shared by one
    # module's children.
    if cache_dir is not None and "JAX_COMPILATION_CACHE_DIR" not in env:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache_dir)
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# Runs `jaxbert train ARGV`, each batch delayed by DELAY seconds so that a test can signal it mid-run.
SLOW_TRAIN = textwrap.dedent("""
    import sys, time
    from jaxbert.train import sources
    delay = float(sys.argv[1])
    make = sources.make_source
    class Slow:
        def __init__(self, inner): self.inner = inner
        def __iter__(self): return self
        def __next__(self):
            time.sleep(delay)
            return next(self.inner)
        def state(self): return self.inner.state()
        def restore(self, s): self.inner.restore(s)
    sources.make_source = lambda *a, **k: Slow(make(*a, **k))
    from jaxbert.cli.main import main
    sys.exit(main(["train"] + sys.argv[2:]))
""")


# Runs `jaxbert train ARGV` and records, in DIR/<pid>.jsonl, the training stream positions each batch read:
# one JSON list per batch of [global position, example index, epoch] for this process's rows.
SEEN_TRAIN = textwrap.dedent("""
    import json, os, sys
    from jaxbert.train import sources
    out = sys.argv[1]
    make = sources.make_source
    class Seen:
        def __init__(self, inner):
            self.inner = inner
            self.f = open(os.path.join(out, f"{os.getpid()}.jsonl"), "a")
        def __iter__(self): return self
        def __next__(self):
            s = self.inner
            first = s.position + s.process_index * s.batch_size
            if hasattr(s, "stream"):  # MLMLoader: the shuffled epochs
                index, epochs = s.stream(first, s.batch_size)
            else:  # SyntheticMLM: example i is position i
                index, epochs = range(first, first + s.batch_size), [0] * s.batch_size
            self.f.write(json.dumps([[first + r, int(i), int(e)] for r, (i, e) in enumerate(zip(index, epochs))]) + "\\n")
            self.f.flush()
            return next(s)
        def state(self): return self.inner.state()
        def restore(self, st): self.inner.restore(st)
        def __getattr__(self, name): return getattr(self.inner, name)  # e.g. a mixture's source_rows
    def wrapped(*a, **k):
        src = make(*a, **k)
        return Seen(src) if k.get("split", "train") == "train" else src
    sources.make_source = wrapped
    from jaxbert.cli.main import main
    sys.exit(main(["train"] + sys.argv[2:]))
""")


def seen_child(record_dir: Path, argv: list[str], env: dict) -> subprocess.Popen:
    """`jaxbert train ARGV` in a child that records the stream positions it reads (SEEN_TRAIN)."""
    Path(record_dir).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", SEEN_TRAIN, str(record_dir), *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_seen(record_dir: Path, argv: list[str], env: dict, timeout: float = 300) -> str:
    """seen_child run to its end; its output, after asserting it exited 0."""
    proc = seen_child(record_dir, argv, env)
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def seen_positions(record_dir: Path, below: int, above: int = 0) -> dict[int, tuple[int, int]]:
    """{global position: (example index, epoch)} a SEEN_TRAIN run read in [above, below): the rows of the
    steps it trained when `below` is its last checkpoint's position (later rows were only prefetched)."""
    out: dict[int, tuple[int, int]] = {}
    for f in sorted(Path(record_dir).glob("*.jsonl")):
        for line in f.read_text().splitlines():
            for pos, index, epoch in json.loads(line):
                if above <= pos < below:
                    assert out.setdefault(pos, (index, epoch)) == (index, epoch), pos
    return out


def loader_position(workdir: Path, step: int) -> int:
    """The global stream position (sequences consumed) a checkpoint records."""
    meta = json.loads((Path(workdir) / "checkpoints" / str(step) / "meta" / "metadata").read_text())
    states = meta["loader"]
    assert all(s == states[0] for s in states), states  # every process records the same position
    st = states[0]
    return st["epoch"] * st["examples"] + st["offset"] if "offset" in st else st["position"]


def child_result(script: str, *args: str, devices: int = 8, timeout: float = 300) -> dict:
    """Runs `python -c script args` on `devices` CPU devices; the JSON it printed after "RESULT "."""
    r = subprocess.run([sys.executable, "-c", script, *args], env=child_env(devices=devices),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.split("RESULT ", 1)[1])


def train_child(argv: list[str], env: dict, delay: float = 0.0, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, str(delay), *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def run_train(argv: list[str], env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxbert.cli.main", "train", *argv], env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def metric_rows(workdir: Path) -> list[dict]:
    path = Path(workdir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# What a run logs that depends on the clock: left out where two runs' logs must agree bit for bit.
TIMING = {"elapsed_s", "steps_per_s", "tokens_per_s", "sequences_per_s", "gflops_per_s", "mfu"}


def untimed_rows(workdir: Path) -> list[dict]:
    """metrics.jsonl's rows without the clock's figures (TIMING)."""
    return [{k: v for k, v in row.items() if k not in TIMING} for row in metric_rows(workdir)]


def flat_params(workdir: Path) -> dict:
    """The workdir's newest params as {"a/b/c": NumPy array}."""
    from flax import traverse_util

    from jaxbert.workdir import read_params
    params, _ = read_params(workdir, log=lambda m: None)
    return {"/".join(k): np.asarray(v) for k, v in traverse_util.flatten_dict(params).items()}


def assert_recipe_refused(data: dict, key: str, words: str, tmp_path: Path, capsys) -> None:
    """The recipe DATA is refused by the recipe reader (a RecipeError starting with KEY and holding WORDS) and by
    `jaxbert train` (exit 2, one stderr line naming KEY, no workdir made)."""
    import pytest

    from jaxbert.cli.main import main
    from jaxbert.train import recipe as recipe_lib
    with pytest.raises(recipe_lib.RecipeError) as e:
        recipe_lib.from_dict(data)
    assert str(e.value).startswith(key) and words in str(e.value), str(e.value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["train", "--config", str(path), "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err
    assert not (tmp_path / "run").exists()


def train_losses(workdir: Path) -> np.ndarray:
    return np.array([r["loss"] for r in metric_rows(workdir) if "loss" in r])


def checkpoint_steps(workdir: Path) -> list[int]:
    d = Path(workdir) / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def final_params(workdir: Path, step: int | None = None) -> dict:
    """Flat {path: ndarray} of a checkpoint's params."""
    from flax import traverse_util
    from jaxbert.workdir import read_params as restore_params
    params, _ = restore_params(workdir, step)
    return {k: np.asarray(v) for k, v in traverse_util.flatten_dict(params, sep="/").items()}
