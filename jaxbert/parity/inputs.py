"""Inputs for a parity check: the checkpoint's own tokenizer on a few texts, or random ids."""

from __future__ import annotations

import numpy as np

from jaxbert.convert import tokenizer_path
from jaxbert.data.tokenizer import load_tokenizer

# Texts of different lengths, each a pair of segments, so the default batch
# exercises padding and token_type_ids.
DEFAULT_TEXTS = [
    "The quick brown fox jumps over the lazy dog. ||| It did not wake up.",
    "Numerical parity means two implementations compute the same numbers. ||| "
    "We check it layer by layer, on real tokens only, and report the worst difference.",
    "Short one. ||| Yes.",
]


def find_tokenizer(model_path):
    """The checkpoint's own tokenizer (tokenizer.json or vocab.txt beside it, or a training
    workdir's run tokenizer), or None."""
    folder = tokenizer_path(model_path)
    return None if folder is None else load_tokenizer(folder)


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
