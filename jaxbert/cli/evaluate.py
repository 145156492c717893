"""`jaxbert evaluate MODEL --eval FILE [--task KIND]`: a fine-tuned model's metrics on labelled data.

The task is the one the model's head records (config.json); --task, when given, must agree with it.
An embedding model (a sentence-transformers directory) is scored by retrieval, or with --label-column by
the Spearman correlation of its cosines (jaxbert.finetune.kinds.embedding.export.evaluate_embedding).
"""

from __future__ import annotations

import sys

from jaxbert.finetune.kinds.embedding.export import evaluate_embedding, is_embedding_model
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
    if is_embedding_model(args.model):  # a sentence-transformers directory: retrieval or STS figures
        metrics = evaluate_embedding(args.model, args.eval, args.text_columns, args.label_column)
    else:
        metrics = evaluate_file(args.model, args.task, args.eval, args.text_columns, args.label_column,
                                args.tokenizer, log=lambda msg: print(msg, file=sys.stderr))
    for key, value in metrics.items():
        print(f"{key:20s} {value:.4f}")
    return 0
