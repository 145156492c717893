"""`jaxbert generate MODEL PROMPT...`: greedy or sampled continuation with a BertLMHeadModel."""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

from jaxbert import fs
from jaxbert.model.generate import generate


def add_arguments(p):
    p.add_argument("model", help="anything jaxbert.from_pretrained reads, holding a tokenizer")
    p.add_argument("prompt", nargs="+")
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    from tokenizers import Tokenizer

    from jaxbert import BertLMHeadModel, from_pretrained

    model, params = from_pretrained(args.model, model_class=BertLMHeadModel)
    tok_path = fs.local_copy(args.model) / "tokenizer.json"
    if not tok_path.exists():
        raise SystemExit(f"{args.model}: no tokenizer.json to encode the prompt with")
    tok = Tokenizer.from_file(str(tok_path))
    encoded = [tok.encode(p).ids[:-1] for p in args.prompt]  # drop the trailing [SEP]
    P = max(map(len, encoded))
    ids = np.array([[0] * (P - len(e)) + e for e in encoded], np.int32)
    mask = (np.arange(P)[None] >= (P - np.array([len(e) for e in encoded]))[:, None]).astype(np.int32)
    sep = tok.token_to_id("[SEP]")  # None when the vocabulary has no [SEP]: no early stop
    t0 = time.perf_counter()
    out = generate(model, params, ids, mask, max_new_tokens=args.max_new_tokens,
                   temperature=args.temperature, top_k=args.top_k, rng=jax.random.key(args.seed),
                   eos_token_id=-1 if sep is None else sep)
    out = np.asarray(out)
    for row in out:
        print(tok.decode([int(t) for t in row], skip_special_tokens=True))
    print(f"({time.perf_counter() - t0:.1f} s with compile)")
    return 0
