"""Examples -> fixed-shape int32 arrays: what the task kinds' features share, and sentence (pair) tasks'.

The kinds that cut their inputs their own way build on these: token tagging
(kinds.tokens.features), multiple choice (kinds.choice), QA (kinds.qa.features). Every kind
gives input_ids, token_type_ids, attention_mask [N, L] ([N, C, L] for choice) and labels: [N]
class ids (int32) or targets (float32), or [N, L] word tags for token tasks, where a word's tag
sits on its first sub-token and -100 (IGNORE) marks sub-tokens, specials and padding.
L is the smallest power-of-two bucket length (see `bucket_lengths`) holding the set's longest row,
and `lengths` [N] keeps every row's own length so batches can be cut to their own, shorter bucket
(jaxbert.finetune.batching.plan_buckets chooses those from the batches).
Rows longer than max_length are truncated (longest first for pairs) and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

from jaxbert.data.tokenizer import DEFAULT_SPECIAL_TOKENS, TokenizerError
from jaxbert.finetune.readers import TextExample
from jaxbert.finetune.row_files import TaskDataError

IGNORE = -100  # label of a position no loss is taken on
SEQUENCE_KEYS = ("input_ids", "token_type_ids", "attention_mask")


@dataclass
class Features:
    """Arrays for one split: `arrays[key]` has N rows; `seq_keys` name those with a trailing L axis."""

    arrays: dict[str, np.ndarray]
    lengths: np.ndarray                     # [N] int32, tokens in each row (longest choice for choice)
    n_truncated: int                        # rows cut to max_length
    max_length: int
    seq_keys: tuple[str, ...] = SEQUENCE_KEYS
    pad_values: dict[str, int] = field(default_factory=dict)  # per key; 0 where absent
    # token tasks: the sentence each row (window) comes from [N], each example's word count [E],
    # and per row the word a token starts (-1 on later pieces, specials and padding) [N, L]
    example_index: np.ndarray | None = None
    n_words: np.ndarray | None = None
    word_index: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def length(self) -> int:
        """L, the padded length of the stored arrays."""
        return int(self.arrays["input_ids"].shape[-1])


def bucket_lengths(max_length: int, smallest: int = 32) -> tuple[int, ...]:
    """Powers of two from `smallest` below max_length, then max_length: (32, 64, 128) for 128."""
    if max_length < 2:
        raise TaskDataError(f"max_length must be at least 2, got {max_length}")
    out, n = [], smallest
    while n < max_length:
        out.append(n)
        n *= 2
    return tuple(out) + (max_length,)


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= length (buckets ascending; the last one when none holds it)."""
    for b in buckets:
        if length <= b:
            return b
    return buckets[-1]


# Spellings of each role, BERT's first: RoBERTa / XLM-R tokenizers have <s>, </s>, <pad> instead.
SPECIAL_SPELLINGS = {"pad": ("[PAD]", "<pad>"), "cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>")}


def special_id(tok: Tokenizer, role: str) -> int:
    """The id of a special token by role (pad, cls, sep): the padding token the tokenizer itself
    pads with when it has one (pad), else the first of BERT's or RoBERTa's spellings it knows."""
    padding = tok.padding if role == "pad" else None
    if padding and padding.get("pad_token") and tok.token_to_id(padding["pad_token"]) is not None:
        return int(tok.token_to_id(padding["pad_token"]))
    spellings = SPECIAL_SPELLINGS.get(role, (DEFAULT_SPECIAL_TOKENS[role],))
    for token in spellings:
        i = tok.token_to_id(token)
        if i is not None:
            return int(i)
    raise TokenizerError(f"tokenizer lacks the {role} token (none of {', '.join(map(repr, spellings))})")


def encode(tok: Tokenizer, inputs: list, max_length: int, pretokenized: bool = False):
    """(encodings, truncated flags) of texts or (a, b) pairs with the tokenizer's template.

    Everything is encoded whole first; only rows over max_length are encoded again with
    longest-first truncation, which leaves the tokenizer's own truncation setting as it was.
    """
    encodings = tok.encode_batch(inputs, is_pretokenized=pretokenized)
    long = [i for i, e in enumerate(encodings) if len(e.ids) > max_length]
    if long:
        saved = tok.truncation
        tok.enable_truncation(max_length, strategy="longest_first")
        try:
            redone = tok.encode_batch([inputs[i] for i in long], is_pretokenized=pretokenized)
        finally:
            tok.no_truncation() if saved is None else tok.enable_truncation(**saved)
        for i, e in zip(long, redone):
            encodings[i] = e
    truncated = np.zeros(len(inputs), dtype=bool)
    truncated[long] = True
    return encodings, truncated


def pad_rows(rows: Sequence[Sequence[int]], length: int, value: int = 0) -> np.ndarray:
    """[N, length] int32 of ragged rows, right-padded with `value`."""
    out = np.full((len(rows), length), value, dtype=np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def sequence_arrays(encodings, max_length: int, pad_id: int, buckets=None):
    lengths = np.array([len(e.ids) for e in encodings], dtype=np.int32)
    length = bucket_for(int(lengths.max(initial=1)), buckets or bucket_lengths(max_length))
    arrays = {"input_ids": pad_rows([e.ids for e in encodings], length, pad_id),
              "token_type_ids": pad_rows([e.type_ids for e in encodings], length),
              "attention_mask": pad_rows([e.attention_mask for e in encodings], length)}
    return arrays, lengths, length


def text_features(examples: Sequence[TextExample], tok: Tokenizer, max_length: int,
                  regression: bool = False) -> Features:
    """Sentence / pair classification (labels int32 [N]) or regression (labels float32 [N])."""
    if not examples:
        raise TaskDataError("no examples to encode")
    inputs = [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in examples]
    encodings, truncated = encode(tok, inputs, max_length)
    pad = special_id(tok, "pad")
    arrays, lengths, _ = sequence_arrays(encodings, max_length, pad)
    arrays["labels"] = np.array([e.label for e in examples], dtype=np.float32 if regression else np.int32)
    return Features(arrays, lengths, int(truncated.sum()), max_length, pad_values={"input_ids": pad})


def pieces(n: int, width: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) ranges of at most `width` over n items (one empty range for n = 0),
    consecutive ones sharing `overlap` items (overlap < width)."""
    out, start = [], 0
    while True:
        end = min(start + width, n)
        out.append((start, end))
        if end >= n:
            return out
        start = end - overlap


def running_text(words: Sequence[str]) -> list[str]:
    """Words as they stand in running text, a space before each but the first (an empty word gets
    none), so that a byte-level BPE encodes "Paris" mid-sentence as "ĠParis", as it does in the text
    it was trained on and in a transformers pipeline given the joined sentence. WordPiece splits
    the spaces off: its pieces are the same either way."""
    return [w if i == 0 or not w else " " + w for i, w in enumerate(words)]
