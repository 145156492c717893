"""`jaxbert train [--config RECIPE] [--workdir DIR] [--set key=value ...]`.

With no arguments it trains the embedded tiny-demo recipe into runs/tiny-demo.
Multi-host off TPU: start one process per host with the same --coordinator
HOST:PORT and --num-processes, and its own --process-id (or the
JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID variables).
"""

from __future__ import annotations

import dataclasses
import typing

from jaxbert.engine.optim import OPTIMIZERS
from jaxbert.errors import InputError
from jaxbert.finetune.downstream import check_items, run_downstream
from jaxbert.plan.batch_search import resolve_auto
from jaxbert.train import outputs
from jaxbert.train.allocator import keep_freed_memory, malloc_mode
from jaxbert.train.loop import train_and_evaluate
from jaxbert.train.recipe import Recipe, load, recipe_names


def add_arguments(parser) -> None:
    names = ", ".join(recipe_names())
    parser.add_argument("--config", default="tiny-demo",
                        help=f"recipe: a YAML path or the name of one shipped with jaxbert ({names}; "
                             f"default tiny-demo; --list describes them)")
    parser.add_argument("--list", action="store_true", help="list the shipped recipes and exit")
    parser.add_argument("--workdir", default=None,
                        help="checkpoints, metrics and outputs (default: runs/NAME in the current directory); "
                             "a workdir with checkpoints resumes")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key, e.g. --set optim.learning_rate=3e-4 (repeatable)")
    parser.add_argument("--stop-after", type=int, default=None, metavar="STEP",
                        help="save and stop after this step, as a preemption would; the same command without it "
                             "resumes on the same schedule")
    parser.add_argument("--coordinator", default=None, help="multi-host: HOST:PORT of process 0")
    parser.add_argument("--num-processes", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=None)


def _recipe_keys() -> list[str]:
    """Every recipe key, dotted (train.steps, optim.learning_rate, every optimizer's own keys)."""
    hints, keys = typing.get_type_hints(Recipe), []
    for f in dataclasses.fields(Recipe):
        section = hints[f.name]
        classes = OPTIMIZERS.values() if f.name == "optim" else [section] if dataclasses.is_dataclass(section) else []
        keys += [f"{f.name}.{g.name}" for c in classes for g in dataclasses.fields(c)] or [f.name]
    return list(dict.fromkeys(keys))


def unknown_hint(extras: list[str]) -> str:
    """What an option train does not take should have been: `--steps 100` is `--set train.steps=100`
    (jaxbert.cli.main reports it with train's usage)."""
    keys, hints, i = _recipe_keys(), [], 0
    while i < len(extras):
        if extras[i].startswith("--"):
            name, eq, value = extras[i][2:].partition("=")
            if not eq and i + 1 < len(extras) and not extras[i + 1].startswith("-"):
                i += 1
                value = extras[i]
            name = name.replace("-", "_")
            hints += [f"--set {k}={value or 'VALUE'}" for k in keys if name in (k, k.rsplit(".", 1)[-1])]
        i += 1
    if hints:
        return f"recipe keys are set with --set: {' or '.join(hints)}"
    return "recipe keys are set with --set KEY=VALUE, e.g. --set train.steps=100"


def run(args) -> int:
    if args.list:
        for name, text in recipe_names().items():
            print(f"{name:24s} {text}")
        return 0
    overrides = list(args.overrides)
    for flag, key in ((args.coordinator, "coordinator_address"), (args.num_processes, "num_processes"),
                      (args.process_id, "process_id")):
        if flag is not None:
            overrides.append(f"parallel.{key}={flag}")
    recipe = load(args.config, overrides)
    if args.stop_after is not None and not 1 <= args.stop_after:
        raise InputError(f"--stop-after: {args.stop_after} is not a step (>= 1)")
    check_items(recipe.outputs.downstream)  # every task, file and recipe, before any training
    workdir = args.workdir or f"runs/{recipe.name}"
    if malloc_mode() == "keep":  # before jax allocates: the step's temporaries stay mapped between steps
        keep_freed_memory()
    # errors: one line and an exit code (cli.main)
    summary = train_and_evaluate(recipe, workdir, stop_at=args.stop_after, plan_auto=resolve_auto)
    if summary["status"] == "already finished":  # the loop said so in one line; show what the run left
        print(outputs.summary_block(recipe, workdir, outputs.last_eval(workdir)))
        _downstream(recipe, workdir, summary["step"])  # a rerun completes the tasks still missing
        return 0
    print(f"{summary['status']} at step {summary['step']} in {_duration(summary['wall_s'])}")
    if summary["status"] == "finished":
        ev = summary["eval"]
        print(outputs.summary_block(recipe, workdir, {**ev, "step": summary["step"]} if ev else ev))
        summary["downstream"] = _downstream(recipe, workdir, summary["step"])
    return 0


def _downstream(recipe, workdir, step: int) -> list:
    results = run_downstream(recipe.outputs.downstream, workdir, step) if recipe.outputs.downstream else []
    for r in results:
        print(f"downstream {r['task']}: {r['eval']} {r['metric']} {r['score']:.4f} ({r['workdir']})")
    return results


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"
