"""`jaxbert train [--config RECIPE] [--workdir DIR] [--set key=value ...]`.

With no arguments it trains the embedded tiny-demo recipe into runs/tiny-demo.
Multi-host off TPU: start one process per host with the same --coordinator
HOST:PORT and --num-processes, and its own --process-id (or the
JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID variables).
"""

from __future__ import annotations

from jaxbert.train.loop import train_and_evaluate
from jaxbert.train.recipe import load


def add_arguments(parser) -> None:
    parser.add_argument("--config", default="tiny-demo",
                        help="recipe: a YAML path or the name of one in configs/train/ (default: tiny-demo)")
    parser.add_argument("--workdir", default=None, help="checkpoints, metrics and outputs (default: runs/NAME)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key, e.g. --set optim.learning_rate=3e-4 (repeatable)")
    parser.add_argument("--coordinator", default=None, help="multi-host: HOST:PORT of process 0")
    parser.add_argument("--num-processes", type=int, default=None)
    parser.add_argument("--process-id", type=int, default=None)


def run(args) -> int:
    overrides = list(args.overrides)
    for flag, key in ((args.coordinator, "coordinator_address"), (args.num_processes, "num_processes"),
                      (args.process_id, "process_id")):
        if flag is not None:
            overrides.append(f"parallel.{key}={flag}")
    recipe = load(args.config, overrides)
    workdir = args.workdir or f"runs/{recipe.name}"
    summary = train_and_evaluate(recipe, workdir)  # errors: one line and an exit code (cli.main)
    ev = summary["eval"]
    if ev:
        print(f"{summary['status']} at step {summary['step']} in {summary['wall_s']:.0f} s: held-out MLM "
              f"accuracy {ev.get('eval_mlm_accuracy', float('nan')):.4f}, loss {ev.get('eval_mlm_loss', float('nan')):.4f}")
    else:
        print(f"{summary['status']} at step {summary['step']} in {summary['wall_s']:.0f} s")
    return 0
