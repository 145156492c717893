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


def make_inputs(tokenizer, texts, max_length: int, vocab_size: int, seed: int = 0, choices: int = 0,
                pad_id: int = 0, type_vocab_size: int = 2, pad_left: bool = False, min_length: int = 0) -> dict:
    """Token ids [B, L] padded with ``pad_id`` (on the right, or the left), with two segments
    where a text has ' ||| ' (one segment type when ``type_vocab_size`` is 1, as in RoBERTa).

    Without a tokenizer, random ids (never ``pad_id``) with the same lengths as the default texts.
    ``choices`` > 0 repeats each row into [B, choices, L] (BertForMultipleChoice).
    ``min_length``: when the longest row is shorter, the first row repeats its tokens up to it
    (within ``max_length``), so the inputs reach past a local attention window; the others stay padded.
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
            ids = rng.integers(1 if pad_id == 0 else 0, vocab_size - (pad_id != 0), n_a + n_b)
            ids = (ids + (ids >= pad_id) * (pad_id != 0)).tolist()  # step over the pad id
            tt = [0] * n_a + [1] * n_b
        rows.append(ids[:max_length])
        types.append([t if t < type_vocab_size else 0 for t in tt[:max_length]])
    want = min(min_length, max_length)
    if rows and rows[0] and max(map(len, rows)) < want:
        reps = -(-want // len(rows[0]))
        rows[0], types[0] = (rows[0] * reps)[:want], (types[0] * reps)[:want]
    L = max(map(len, rows))
    out = {k: np.zeros((len(rows), L), np.int32) for k in ("input_ids", "token_type_ids", "attention_mask")}
    out["input_ids"][:] = pad_id
    for i, (ids, tt) in enumerate(zip(rows, types)):
        at = slice(L - len(ids), L) if pad_left else slice(0, len(ids))
        out["input_ids"][i, at] = ids
        out["token_type_ids"][i, at] = tt
        out["attention_mask"][i, at] = 1
    if choices:
        out = {k: np.repeat(v[:, None], choices, axis=1) for k, v in out.items()}
    return out
