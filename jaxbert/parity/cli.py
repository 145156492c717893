"""`jaxbert parity MODEL`: jaxbert vs transformers on the checkpoint's own tokenizer and text."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

# Texts of different lengths, each a pair of segments, so the default batch
# exercises padding and token_type_ids.
DEFAULT_TEXTS = [
    "The quick brown fox jumps over the lazy dog. ||| It did not wake up.",
    "Numerical parity means two implementations compute the same numbers. ||| "
    "We check it layer by layer, on real tokens only, and report the worst difference.",
    "Short one. ||| Yes.",
]


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


def find_tokenizer(model_path: Path):
    """The checkpoint's own tokenizer (tokenizer.json or vocab.txt beside it), or None."""
    from ..train.tokenizer import load_tokenizer
    folder = model_path if model_path.is_dir() else model_path.parent
    for name in ("tokenizer.json", "vocab.txt"):
        if (folder / name).is_file():
            return load_tokenizer(folder / name)
    return None


def make_inputs(tokenizer, texts, max_length: int, vocab_size: int, seed: int = 0, choices: int = 0) -> dict:
    """Token ids [B, L] padded on the right, with two segments where a text has ' ||| '.

    Without a tokenizer, random ids with the same lengths as the default texts.
    ``choices`` > 0 repeats each row into [B, choices, L] (BertForMultipleChoice).
    """
    rows, types = [], []
    rng = np.random.default_rng(seed)
    for i, text in enumerate(texts):
        first, _, second = (s.strip() for s in text.partition("|||"))
        if tokenizer is not None:
            enc = tokenizer.encode(first, second) if second else tokenizer.encode(first)
            ids, tt = enc.ids, enc.type_ids
        else:
            n_a, n_b = 4 + 5 * i, (3 + 2 * i) if second else 0
            ids = rng.integers(1, vocab_size, n_a + n_b).tolist()
            tt = [0] * n_a + [1] * n_b
        rows.append(ids[:max_length])
        types.append(tt[:max_length])
    L = max(map(len, rows))
    out = {k: np.zeros((len(rows), L), np.int32) for k in ("input_ids", "token_type_ids", "attention_mask")}
    for i, (ids, tt) in enumerate(zip(rows, types)):
        out["input_ids"][i, :len(ids)] = ids
        out["token_type_ids"][i, :len(ids)] = tt
        out["attention_mask"][i, :len(ids)] = 1
    if choices:
        out = {k: np.repeat(v[:, None], choices, axis=1) for k, v in out.items()}
    return out


def run(args) -> int:
    from ..convert import from_pretrained
    from .compare import compare

    module, params = from_pretrained(args.model, model_class=args.model_class)
    tokenizer = find_tokenizer(Path(args.model))
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
