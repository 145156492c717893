"""Token classification (entity tagging): a sentence's words, one IOB tag per word.

The kind is this folder: read by reader.read_tokens (CoNLL text or JSONL), featurized by
features.token_features (a word's tag on its first piece, long sentences in overlapping
windows), trained with cross-entropy over labelled tokens only (the loss weight counts them),
decoded back to one tag per word (a word in several windows takes the window where it sits furthest from an
edge; a word without pieces is "O"), scored by seqeval-style entity F1, saved as
...ForTokenClassification with the tag names in id2label. Its option: the stride of the windows.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from jaxbert.engine.recipe import POSITIVE, check_ranges
from jaxbert.finetune.features import IGNORE, Features
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.kinds.tokens.features import EMPTY_WORD_TAG, token_features
from jaxbert.finetune.kinds.tokens.reader import read_tokens
from jaxbert.finetune.losses import class_sums, valid_weights


@dataclasses.dataclass(frozen=True)
class TokensOptions:
    stride: int = 128  # pieces shared by consecutive windows of a long sentence (at most half a window)

    def check(self, prefix: str = "") -> None:
        check_ranges(prefix, {"stride": (self.stride, *POSITIVE)})


class Tokens(Kind):
    name = "tokens"
    head = "ForTokenClassification"
    named_labels = True
    metric_names = ("entity",)
    main_metric = "entity_f1"
    Options = TokensOptions

    def read_file(self, path, labels, labelled, table):
        return read_tokens(path, labels, labelled)

    def make_features(self, examples, tok, max_length, options, labels):
        return token_features(examples, tok, max_length, options.stride), None

    def weights(self, batch: dict):
        """valid x labelled [..., B, L]: a token weighs 1 where it carries its word's tag."""
        return valid_weights(batch)[..., None] * (batch["labels"] != IGNORE).astype(jnp.float32)

    def sums(self, out, batch: dict) -> dict:
        labels = jnp.where(batch["labels"] == IGNORE, 0, batch["labels"])  # ignored positions weigh 0
        return class_sums(out.logits, labels, self.weights(batch))

    def decode_outputs(self, outputs, features, windows, labels, options) -> dict:
        """One tag name per word of every sentence, and "empty_words": per sentence the words without pieces."""
        return decode_tags(outputs["logits"], features, labels)

    def references(self, examples: list, labels: Sequence[str] | None = None):
        return [[labels[t] for t in e.tags] for e in examples]

    def score(self, metric_names, predictions, examples, labels=None) -> dict:
        """Tag lists are padded with "O" where truncation cut words."""
        gold = self.references(examples, labels)
        predictions = [p + ["O"] * (len(g) - len(p)) for p, g in zip(predictions, gold)]
        return super().score_against(metric_names, predictions, gold)

    def inputs(self, example, columns: dict) -> dict:
        return {"words": list(example.words)}

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        row = {"tags": decoded["predictions"][i]}
        if decoded.get("empty_words") and decoded["empty_words"][i]:
            row["empty_words"] = decoded["empty_words"][i]
        return row


def decode_tags(logits, features: Features, labels: Sequence[str]) -> dict:
    ids = logits.argmax(-1)
    if features.word_index is None:  # one row per sentence, tags on first pieces (features built elsewhere)
        word_starts = features.arrays["labels"] != IGNORE
        return {"predictions": [[labels[t] for t in ids[i][word_starts[i]]] for i in range(len(features))],
                "scores": None}
    best: list[dict[int, tuple[int, int]]] = [{} for _ in range(len(features.n_words))]
    for row in range(len(features)):
        k, n = int(features.example_index[row]), int(features.lengths[row])
        for t in np.flatnonzero(features.word_index[row] >= 0):
            word, margin = int(features.word_index[row, t]), min(int(t), n - 1 - int(t))
            if word not in best[k] or margin > best[k][word][0]:
                best[k][word] = (margin, int(ids[row, t]))
    tags, empty = [], []
    for k, n_words in enumerate(features.n_words.tolist()):
        tags.append([labels[best[k][w][1]] if w in best[k] else EMPTY_WORD_TAG for w in range(n_words)])
        empty.append([w for w in range(n_words) if w not in best[k]])
    return {"predictions": tags, "scores": None, "empty_words": empty}


KIND = Tokens()
