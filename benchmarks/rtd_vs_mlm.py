"""Issue 51 item 6: replaced-token detection against masked language modelling at equal training FLOPs.

The MLM side is tiny-demo (BERT 3 x 128, 25% masking); the RTD side is electra-tiny (its discriminator is
the same encoder as an ELECTRA, 3 x 128; its generator half as wide, 3 x 64, tied embeddings, 15% masking,
lambda 50). Both read the embedded corpus with the same batch (16 x 64), optimizer and schedule shape.

    python benchmarks/rtd_vs_mlm.py flops                 # XLA's FLOPs of each compiled train step
    python benchmarks/rtd_vs_mlm.py task                  # finetune-demo's task as ROOT/task/*.jsonl
    python benchmarks/rtd_vs_mlm.py commands --rtd-steps N  # the protocol's commands (MLM steps from the ratio)
    python benchmarks/rtd_vs_mlm.py run --rtd-steps N     # runs them (skips a finished step)
    python benchmarks/rtd_vs_mlm.py table                 # tabulates ROOT's results
    python benchmarks/rtd_vs_mlm.py probe --rtd-steps 400  # electra-tiny with uniform random replacements
    python benchmarks/rtd_vs_mlm.py probe --replace unigram --rtd-steps 600  # ... drawn by corpus frequency

1. FLOPs per train step: each recipe's train step is lowered and compiled for this CPU from shapes alone (as
   `jaxbert plan` does: jaxbert.plan.compile_step) and XLA's cost_analysis() read. The RTD step holds both
   models' forward and backward (the generator included), the sampling and both losses; the MLM step the
   model's, with logits at the masked slots only. Unscanned layers, so every layer is counted.
2. Pretraining: electra-tiny for N steps, tiny-demo for round(N x FLOPs_rtd / FLOPs_mlm) steps (each
   recipe's warmup and linear decay over its own steps), seeds 0, 1, 2 (--seeds), `jaxbert train`.
3. Fine-tuning: each pretraining workdir on `jaxbert finetune-demo`'s task (docstring kind, 200 train and 80
   held-out per kind, jaxbert.finetune.demo.docstring_task) with its recipe (finetune-demo: 3 epochs, lr 1e-4,
   fine-tuning seed 0 for every model), `jaxbert finetune --model WORKDIR` reading the RTD run's discriminator.
   The score is the held-out accuracy and macro F1 at the end of training, as the demo reports.
4. The table: each seed's figures, mean +- sample std per objective, and whether |mean difference| exceeds
   the larger of the two standard deviations (the seeds' spread).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(os.environ.get("RTD_VS_MLM_ROOT", "runs/rtd-vs-mlm"))
CONFIGS = {"rtd": "electra-tiny", "mlm": "tiny-demo"}
FT_CONFIG = "finetune-demo"
PER_KIND = (200, 80)  # finetune-demo's defaults (jaxbert.finetune.demo.DEFAULT_PER_KIND)
KINDS = ("module", "class", "function")  # jaxbert.finetune.demo.KINDS, its label order


def step_flops(config: str, vocab: int | None = None) -> float:
    """XLA's FLOPs of one compiled train step of recipe `config` on this process's devices."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from jaxbert.engine.optim import make_optimizer
    from jaxbert.engine.parallel import MeshRunner
    from jaxbert.engine.step import make_train_step
    from jaxbert.model.classes import build_model
    from jaxbert.plan.compile_step import abstract_batch
    from jaxbert.train import mlm, rtd, rtd_loop
    from jaxbert.train.recipe import load

    recipe = load(config)
    cfg = recipe.model_config(vocab or recipe.data.vocab_size)
    if recipe.train.objective == "rtd":
        model, step = rtd_loop.build_pair(recipe, cfg), make_train_step(rtd.rtd_spec(recipe.rtd.weight))
    else:
        model, step = build_model(recipe.model.model_class, cfg, recipe.model.options()), mlm.train_step
    runner = MeshRunner(recipe.parallel, devices=jax.devices()[:1])
    tx, schedule = make_optimizer(recipe.optim, recipe.train.steps)
    dummy = jnp.zeros((1, recipe.data.seq_len), jnp.int32)
    runner.prepare(model, lambda: model.init_boxed(jax.random.PRNGKey(0), dummy, dummy)["params"], tx, schedule,
                   recipe.train.norm_metrics)
    batch = abstract_batch(recipe, recipe.train.per_device_batch_size, NamedSharding(runner.mesh, P(None, "data")))
    key = jax.ShapeDtypeStruct((2,), np.uint32, sharding=runner.replicated)
    compiled = runner.compile_train(step).lower(runner.abstract, batch, key).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost["flops"])


def flops_cmd(args) -> dict:
    out = {name: step_flops(cfg, args.vocab) for name, cfg in CONFIGS.items()}
    out["ratio"] = out["rtd"] / out["mlm"]
    print(f"train-step FLOPs (XLA cost analysis, batch 16 x 64, vocab {args.vocab}): "
          f"RTD (electra-tiny, generator included) {out['rtd']:.4g}, MLM (tiny-demo) {out['mlm']:.4g}, "
          f"ratio {out['ratio']:.4f}")
    return out


def mlm_steps(rtd_steps: int, ratio: float) -> int:
    return round(rtd_steps * ratio)


def commands(rtd_steps: int, ratio: float, seeds, root: Path = ROOT) -> list[tuple[str, list[str]]]:
    """(label, argv) of the whole protocol, in order."""
    steps = {"rtd": rtd_steps, "mlm": mlm_steps(rtd_steps, ratio)}
    out = []
    for seed in seeds:
        for obj in ("rtd", "mlm"):
            wd = root / f"{obj}-s{seed}"
            out.append((f"train {obj} seed {seed}",
                        ["jaxbert", "train", "--config", CONFIGS[obj], "--set", f"train.seed={seed}",
                         "--set", f"train.steps={steps[obj]}", "--set", "outputs.plot=false",
                         "--workdir", str(wd)]))
            out.append((f"finetune {obj} seed {seed}",
                        ["jaxbert", "finetune", "--config", FT_CONFIG, "--model", str(wd),
                         "--train", str(root / "task" / "train.jsonl"),
                         "--eval", str(root / "task" / "heldout.jsonl"),
                         "--task", "classification", "--text-columns", "text", "--label-column", "label",
                         "--labels", ",".join(KINDS), "--workdir", str(root / f"ft-{obj}-s{seed}")]))
    return out


def jaxbert_exe() -> str:
    """This interpreter's jaxbert script (the venv's), else the one on PATH."""
    here = Path(sys.executable).parent / "jaxbert"
    return str(here) if here.exists() else "jaxbert"


def write_task(root: Path) -> None:
    """finetune-demo's task, as the demo builds it, into ROOT/task/{train,heldout}.jsonl."""
    from jaxbert.finetune.demo import docstring_task, write_jsonl
    if not (root / "task" / "heldout.jsonl").exists():
        train, test = docstring_task(*PER_KIND)
        write_jsonl(root / "task" / "train.jsonl", train)
        write_jsonl(root / "task" / "heldout.jsonl", test)


def done(label: str, argv: list[str]) -> bool:
    wd = Path(argv[argv.index("--workdir") + 1])
    return (wd / "hf" / "config.json").exists() if label.startswith("train") else (wd / "eval.json").exists()


def run_cmd(args, ratio: float, flops: dict | None = None) -> None:
    args.root.mkdir(parents=True, exist_ok=True)
    write_task(args.root)
    (args.root / "logs").mkdir(exist_ok=True)
    (args.root / "protocol.json").write_text(json.dumps(
        {"flops_per_step": flops, "ratio": ratio, "rtd_steps": args.rtd_steps, "mlm_steps": mlm_steps(args.rtd_steps, ratio),
         "seeds": args.seeds}, indent=2) + "\n")
    for label, argv in commands(args.rtd_steps, ratio, args.seeds, args.root):
        if done(label, argv):
            print(f"{label}: done already")
            continue
        log = args.root / "logs" / (label.replace(" ", "-") + ".log")
        t0 = time.time()
        with open(log, "w") as f:
            rc = subprocess.call([jaxbert_exe(), *argv[1:]], stdout=f, stderr=subprocess.STDOUT)
        print(f"{label}: exit {rc} in {time.time() - t0:.0f} s (log {log})", flush=True)
        if rc:
            raise SystemExit(rc)


def _last(path: Path, key: str):
    value = None
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if key in rec:
                value = rec[key]
    return value


def results(root: Path, seeds) -> dict:
    """{objective: [row per finished seed]}: fine-tuned held-out accuracy / macro F1 at the end of training,
    and the pretraining run's own held-out figure (MLM accuracy; RTD: the discriminator's AUC)."""
    out = {"rtd": [], "mlm": []}
    for obj in out:
        for seed in seeds:
            ev = root / f"ft-{obj}-s{seed}" / "eval.json"
            if not ev.exists():
                continue
            final = json.loads(ev.read_text())["evaluations"][-1]["evals"]["heldout"]
            metrics = root / f"{obj}-s{seed}" / "metrics.jsonl"
            pre = _last(metrics, "eval_rtd_auc" if obj == "rtd" else "eval_mlm_accuracy")
            out[obj].append({"seed": seed, "accuracy": final["accuracy"], "macro_f1": final["macro_f1"],
                             "pretrain": pre, "steps": _last(metrics, "step")})
    return out


def _ms(values) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else math.nan)


def table(root: Path, seeds) -> str:
    res = results(root, seeds)
    proto = json.loads((root / "protocol.json").read_text()) if (root / "protocol.json").exists() else {}
    lines = [f"RTD (electra-tiny, {proto.get('rtd_steps')} steps) vs MLM (tiny-demo, {proto.get('mlm_steps')} steps) "
             f"at equal train FLOPs (ratio {proto.get('ratio', math.nan):.4f}); fine-tuned on finetune-demo's task "
             f"({PER_KIND[0]} train / {PER_KIND[1]} held-out per kind), held-out scores at the end of fine-tuning",
             "", "| objective | seed | pretraining steps | pretraining held-out | accuracy | macro F1 |",
             "|---|---|---|---|---|---|"]
    for obj, rows in res.items():
        what = "disc. AUC" if obj == "rtd" else "MLM acc."
        for r in rows:
            pre = "-" if r["pretrain"] is None else f"{what} {r['pretrain']:.4f}"
            lines.append(f"| {obj.upper()} | {r['seed']} | {r['steps']} | {pre} | {r['accuracy']:.4f} | "
                         f"{r['macro_f1']:.4f} |")
    lines += ["", "| objective | seeds | accuracy mean ± std | macro F1 mean ± std |", "|---|---|---|---|"]
    stats = {}
    for obj, rows in res.items():
        if rows:
            stats[obj] = {m: _ms([r[m] for r in rows]) for m in ("accuracy", "macro_f1")}
            a, f = stats[obj]["accuracy"], stats[obj]["macro_f1"]
            lines.append(f"| {obj.upper()} | {len(rows)} | {a[0]:.4f} ± {a[1]:.4f} | {f[0]:.4f} ± {f[1]:.4f} |")
    if len(stats) == 2:
        lines.append("")
        for m in ("accuracy", "macro_f1"):
            (mr, sr), (mm, sm) = stats["rtd"][m], stats["mlm"][m]
            diff, spread = mr - mm, max(sr, sm)
            n_r, n_m = len(res["rtd"]), len(res["mlm"])
            if min(n_r, n_m) < 2:  # one seed has no spread to weigh the difference against
                lines.append(f"{m}: RTD - MLM = {diff:+.4f}; one seed per objective: no spread to judge it by")
                continue
            verdict = "beyond" if abs(diff) > spread else "within"
            se = math.sqrt(sr ** 2 / n_r + sm ** 2 / n_m)  # the standard error of the difference of the means
            lines.append(f"{m}: RTD - MLM = {diff:+.4f}; the seeds' spread (larger std) {spread:.4f}: {verdict} it "
                         f"(standard error of the difference {se:.4f}, |diff| / se = {abs(diff) / se if se else (0.0 if diff == 0 else math.inf):.2f})")
    return "\n".join(lines)


def probe(args) -> None:
    """electra-tiny trained with replacements drawn without the generator (the generator still trains on its
    MLM loss): a check of what the discriminator can learn, printing its training figures every 50 steps.
    uniform: ids uniform over the vocabulary, so a rare id is likely a replacement and the token alone tells;
    told apart quickly, they show the plumbing works. unigram: ids drawn by their frequency in the run's own
    training rows, so that P(replaced | id) is the same for every id and only the context tells."""
    import glob

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jaxbert.cli.main import main as cli
    from jaxbert.train import rtd

    workdir = args.root / "-".join(["probe", args.replace] + [kv.replace("/", "_") for kv in args.overrides])

    def uniform(key, logits):  # a token id in [5, V): no special tokens (the recipes' tokenizer puts them first)
        return jax.random.randint(key, logits.shape[:-1], 5, logits.shape[-1]).astype(jnp.int32)

    def unigram(key, logits):  # traced at the first step, after the run has prepared WORKDIR/data
        shards = sorted(glob.glob(str(workdir / "data" / "train-*.npy")))
        ids = np.concatenate([np.load(f).reshape(-1) for f in shards if "-pairs" not in f and "-segments" not in f])
        counts = np.bincount(ids.astype(np.int64), minlength=logits.shape[-1]).astype(np.float64)
        counts[:5] = 0.0  # no special tokens, as above
        log_p = jnp.asarray(np.log(np.maximum(counts / counts.sum(), 1e-30)), jnp.float32)
        return jax.random.categorical(key, jnp.broadcast_to(log_p, logits.shape)).astype(jnp.int32)

    rtd.sample_replacements = {"uniform": uniform, "unigram": unigram}[args.replace]
    if cli(["train", "--config", CONFIGS["rtd"], "--set", f"train.steps={args.rtd_steps}", "--set",
            "train.log_every=50", "--set", "train.eval_every=0", "--set", "outputs.plot=false",
            "--workdir", str(workdir)] + [a for kv in args.overrides for a in ("--set", kv)]) != 0:
        raise SystemExit(f"the probe run in {workdir} failed")
    print("step  rtd_loss  rtd_auc  rtd_accuracy  replaced_fraction")
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "rtd_auc" in r:
            print(f"{r['step']:>4}  {r['rtd_loss']:.4f}    {r['rtd_auc']:.4f}   {r['rtd_accuracy']:.4f}        "
                  f"{r['replaced_fraction']:.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("flops", "task", "commands", "run", "table", "probe"))
    p.add_argument("--vocab", type=int, default=4096, help="the tokenizer's vocabulary (the recipes' 4096)")
    p.add_argument("--rtd-steps", type=int, default=600, help="RTD steps (MLM: this x the FLOPs ratio)")
    p.add_argument("--ratio", type=float, default=None, help="FLOPs_rtd / FLOPs_mlm (default: measured)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--replace", choices=("uniform", "unigram"), default="uniform",
                   help="probe: how the replacements are drawn instead of by the generator")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="probe: a recipe override for the probe's run (jaxbert train --set)")
    p.add_argument("--root", type=Path, default=ROOT)
    args = p.parse_args(argv)
    if args.what == "table":
        print(table(args.root, args.seeds))
        return 0
    if args.what == "task":
        write_task(args.root)
        return 0
    if args.what == "probe":
        probe(args)
        return 0
    flops = None if args.ratio is not None else flops_cmd(args)
    ratio = args.ratio if flops is None else flops["ratio"]
    if args.what == "commands":
        print(f"# MLM steps = round({args.rtd_steps} x {ratio:.4f}) = {mlm_steps(args.rtd_steps, ratio)}")
        print(f"python benchmarks/rtd_vs_mlm.py task --root {args.root}   # finetune-demo's task -> {args.root}/task")
        for label, argv in commands(args.rtd_steps, ratio, args.seeds, args.root):
            print(" ".join(argv))
    elif args.what == "run":
        run_cmd(args, ratio, flops)
        print(table(args.root, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
