"""`jaxbert evaluate MODEL --eval FILE [--task KIND]`: a fine-tuned model's metrics on labelled data.

The task is the one the model's head records (config.json); --task, when given, must agree with it.
"""

from __future__ import annotations

import sys

from jaxbert.finetune.predict import evaluate_file
from jaxbert.finetune.kinds import KINDS


MODEL_ARGUMENTS = {"model": "MODEL"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser) -> None:
    parser.add_argument("model", help="a fine-tuned Hugging Face directory (e.g. WORKDIR/best)")
    parser.add_argument("--task", choices=list(KINDS), default=None,
                        help="default: from the model's config (a task its head does not have is refused)")
    parser.add_argument("--eval", required=True, metavar="FILE", help="labelled examples (a file)")
    parser.add_argument("--text-columns", nargs="+", default=None, metavar="COLUMN")
    parser.add_argument("--label-column", default=None)
    parser.add_argument("--tokenizer", default=None)


def run(args) -> int:
    metrics = evaluate_file(args.model, args.task, args.eval, args.text_columns, args.label_column, args.tokenizer,
                            log=lambda msg: print(msg, file=sys.stderr))
    for key, value in metrics.items():
        print(f"{key:20s} {value:.4f}")
    return 0
