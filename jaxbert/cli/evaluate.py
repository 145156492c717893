"""`jaxbert evaluate MODEL --task KIND --eval FILE`: a fine-tuned model's metrics on labelled data."""

from __future__ import annotations

from jaxbert.finetune.predict import evaluate_file
from jaxbert.finetune.readers import KINDS


def add_arguments(parser) -> None:
    parser.add_argument("model", help="a fine-tuned Hugging Face directory (e.g. WORKDIR/best)")
    parser.add_argument("--task", choices=KINDS, required=True)
    parser.add_argument("--eval", required=True, metavar="FILE", help="labelled examples")
    parser.add_argument("--text-columns", nargs="+", default=None, metavar="COLUMN")
    parser.add_argument("--label-column", default=None)
    parser.add_argument("--tokenizer", default=None)


def run(args) -> int:
    metrics = evaluate_file(args.model, args.task, args.eval, args.text_columns, args.label_column, args.tokenizer)
    for key, value in metrics.items():
        print(f"{key:20s} {value:.4f}")
    return 0
