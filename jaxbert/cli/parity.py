"""`jaxbert parity MODEL`: jaxbert vs transformers on the checkpoint's own tokenizer and text."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from jaxbert import fs
from jaxbert.parity.inputs import DEFAULT_TEXTS, find_tokenizer, make_inputs


def add_arguments(p):
    p.add_argument("model", help="anything jaxbert.from_pretrained reads")
    p.add_argument("--text", action="append", default=None,
                   help='input text, repeatable; "first ||| second" gives two segments')
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="jaxbert compute dtype (transformers runs float32)")
    p.add_argument("--grad", action="store_true", help="also compare every parameter's gradient")
    p.add_argument("--json", type=Path, default=None, help="write the table as JSON")
    p.add_argument("--tolerance", type=float, default=None,
                   help="max abs diff on hidden states (default 1e-5 fp32, 0.15 bf16); logits scale it")
    p.add_argument("--model-class", default=None, help="jaxbert class name (default: from the config)")
    p.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    from jaxbert.convert import from_pretrained
    from jaxbert.parity.compare import compare

    module, params = from_pretrained(args.model, model_class=args.model_class)
    tokenizer = find_tokenizer(fs.local_copy(args.model))  # a URL: the copy from_pretrained fetched
    texts = args.text or DEFAULT_TEXTS
    print(f"{args.model}: {type(module).__name__}; inputs: {len(texts)} texts, "
          f"{'tokenizer ' + ('found' if tokenizer else 'missing: random ids')}")
    choices = 2 if type(module).__name__ == "BertForMultipleChoice" else 0
    inputs = make_inputs(tokenizer, texts, args.max_length, module.config.vocab_size, args.seed, choices)
    encoder = None
    if module.config.add_cross_attention:  # decoders with cross-attention need encoder states
        rng = np.random.default_rng(args.seed)
        B = inputs["input_ids"].shape[0]
        encoder = (rng.normal(size=(B, 7, module.config.hidden_size)).astype(np.float32), np.ones((B, 7), np.int32))
    report = compare(module, params, inputs, dtype=args.dtype, tolerance=args.tolerance, grad=args.grad,
                     encoder_states=encoder)
    print(report.table())
    if args.json:
        report.write_json(args.json)
    sys.stdout.flush()
    return 0 if report.ok else 1
