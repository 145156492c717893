"""`jaxbert predict MODEL FILE [--task KIND] [--out PRED.jsonl]`: a fine-tuned model's predictions as JSONL.

One line per example, its input beside the prediction: classification {id, <text columns>,
label, score}; regression {id, <text columns>, value}; tokens {id, words, tags[, empty_words]};
qa {id, question, context, answer}; choice {id, context, endings, label, score}; an
embedding model (a sentence-transformers directory) {id, <its text column>, embedding}. Without --out they go
to stdout. The model's head decides the task; a --task that contradicts it is refused.
"""

from __future__ import annotations

import json

from jaxbert.finetune.kinds.embedding.export import embedding_rows, is_embedding_model
from jaxbert.finetune.predict import predict_file, write_predictions
from jaxbert.fs import check_new_file
from jaxbert.finetune.kinds import KINDS


MODEL_ARGUMENTS = {"model": "MODEL"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser) -> None:
    parser.add_argument("model", help="a fine-tuned Hugging Face directory (e.g. WORKDIR/best)")
    parser.add_argument("file", help="examples to predict (labels not needed)")
    parser.add_argument("--task", choices=list(KINDS), default=None, help="default: from the model's config (a task its head does not have is refused)")
    parser.add_argument("--out", default=None, help="PRED.jsonl (default: stdout)")
    parser.add_argument("--text-columns", nargs="+", default=None, metavar="COLUMN",
                        help="default: the columns the model was trained on")
    parser.add_argument("--tokenizer", default=None)


def run(args) -> int:
    if args.out:
        check_new_file(args.out, "--out")  # before any work: exists, or its folder does not
    if is_embedding_model(args.model):  # a sentence-transformers directory: embeddings, not a head's predictions
        rows = embedding_rows(args.model, args.file, args.text_columns)
    else:
        rows = predict_file(args.model, args.file, args.task, args.text_columns, args.tokenizer)
    if args.out:
        write_predictions(rows, args.out)
        print(f"{len(rows)} predictions -> {args.out}")
    else:
        for row in rows:
            print(json.dumps(row))
    return 0
