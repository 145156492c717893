"""Token tagging's arrays: each word's tag on its first piece, a long sentence in overlapping windows.

A sentence longer than max_length is cut into overlapping windows (as QA cuts a context), so
every word is tagged; ``Features.word_index`` maps each window back to its sentence's words, and
a word the tokenizer reduces to nothing (a soft hyphen, a zero-width space, a byte-order mark, "")
has no piece, no loss and the tag "O" (EMPTY_WORD_TAG).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

from jaxbert.finetune.features import (IGNORE, SEQUENCE_KEYS, Features, bucket_for, bucket_lengths, pad_rows, pieces,
                                       running_text, special_id)
from jaxbert.finetune.kinds.tokens.reader import TokenExample
from jaxbert.finetune.row_files import TaskDataError

EMPTY_WORD_TAG = "O"  # the tag of a word without word pieces: the model never sees it


def word_labels(word_ids: Sequence[int | None], tags: Sequence[int]) -> list[int]:
    """Per token: the tag of the word it starts, IGNORE on later pieces of a word and on specials."""
    out, previous = [], None
    for w in word_ids:
        out.append(IGNORE if w is None or w == previous else int(tags[w]))
        previous = w
    return out


def token_features(examples: Sequence[TokenExample], tok: Tokenizer, max_length: int,
                   stride: int = 128) -> Features:
    """Tagging: labels [N, L] hold each word's tag id on its first sub-token, IGNORE elsewhere.

    A sentence of more than max_length - 2 pieces becomes several rows, [CLS] window [SEP],
    consecutive windows sharing min(stride, half a window) pieces; a window's pieces that
    continue a word begun in an earlier window carry IGNORE. Nothing is cut (n_truncated 0).
    """
    if not examples:
        raise TaskDataError("no examples to encode")
    if max_length < 3:
        raise TaskDataError(f"max_length must be at least 3 for tagging, got {max_length}")
    cls, sep, pad = special_id(tok, "cls"), special_id(tok, "sep"), special_id(tok, "pad")
    encodings = tok.encode_batch([running_text(e.words) for e in examples], is_pretokenized=True,
                                 add_special_tokens=False)
    width = max_length - 2
    overlap = max(0, min(stride, width // 2))
    ids, labels, words, where = [], [], [], []
    for k, (enc, example) in enumerate(zip(encodings, examples)):
        starts = [-1 if w is None or (t and enc.word_ids[t - 1] == w) else int(w) for t, w in enumerate(enc.word_ids)]
        for a, b in pieces(len(enc.ids), width, overlap):
            ids.append([cls, *enc.ids[a:b], sep])
            words.append([-1, *starts[a:b], -1])
            labels.append([IGNORE] + [IGNORE if w < 0 else int(example.tags[w]) for w in starts[a:b]] + [IGNORE])
            where.append(k)
    lengths = np.array([len(r) for r in ids], dtype=np.int32)
    length = bucket_for(int(lengths.max()), bucket_lengths(max_length))
    arrays = {"input_ids": pad_rows(ids, length, pad), "token_type_ids": pad_rows([[0] * len(r) for r in ids], length),
              "attention_mask": pad_rows([[1] * len(r) for r in ids], length),
              "labels": pad_rows(labels, length, IGNORE)}
    return Features(arrays, lengths, 0, max_length, SEQUENCE_KEYS + ("labels",), {"input_ids": pad, "labels": IGNORE},
                    example_index=np.array(where, dtype=np.int32),
                    n_words=np.array([len(e.words) for e in examples], dtype=np.int32),
                    word_index=pad_rows(words, length, -1))
