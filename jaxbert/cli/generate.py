"""`jaxbert generate MODEL PROMPT...`: greedy or sampled continuation with a BertLMHeadModel."""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxbert import fs
from jaxbert.convert import from_pretrained, tokenizer_path
from jaxbert.convert.pretrained import family_class
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.errors import InputError
from jaxbert.infer.generate import generate


MODEL_ARGUMENTS = {"model": "MODEL"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(p):
    p.add_argument("model", help="anything jaxbert.from_pretrained reads, holding a tokenizer")
    p.add_argument("prompt", nargs="+")
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    tok_dir = tokenizer_path(fs.local_copy(args.model))  # a URL: a local copy of it
    if tok_dir is None or not any((tok_dir / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
        raise InputError(f"{args.model}: no tokenizer.json or vocab.txt to encode the prompt with")
    tok = load_tokenizer(tok_dir)  # stored padding/truncation switched off
    # the family's causal-LM class (BertLMHeadModel); refused by name where the family has none
    model, params = from_pretrained(args.model, model_class=family_class(args.model, "LMHeadModel", "generate"))
    encoded = [tok.encode(p).ids[:-1] for p in args.prompt]  # drop the trailing [SEP]
    limit = model.config.max_position_embeddings
    for p, e in zip(args.prompt, encoded):
        if len(e) + args.max_new_tokens > limit:  # a prompt cut short would be continued from the wrong place
            raise InputError(f"prompt {p[:40]!r}: {len(e)} tokens + --max-new-tokens {args.max_new_tokens} "
                             f"exceed the model's max_position_embeddings {limit}")
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
