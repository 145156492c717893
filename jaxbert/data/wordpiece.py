"""A deterministic WordPiece vocabulary builder.

The `tokenizers` WordPieceTrainer counts words and assigns the ids of new
symbols in hash-map order, which is seeded at random in every process; merges
whose pair counts tie are then broken by those ids, so two trainings on the
same text give different vocabularies (and a demo's score moves with them).
This builder runs the same procedure, frequency-ranked pair merges with a
"##" continuation prefix, with every order fixed: the alphabet is sorted,
and ties between equally frequent pairs go to the pair of older symbols.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Iterable

PREFIX = "##"


def count_words(docs: Iterable[str], normalizer, pre_tokenizer) -> Counter:
    """Word -> count after the tokenizer's own normalizer and pre-tokenizer."""
    counts: Counter = Counter()
    for doc in docs:
        counts.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(doc)))
    return counts


def build_vocab(word_counts: dict[str, int], vocab_size: int, special_tokens: list[str],
                min_frequency: int = 2) -> list[str]:
    """Tokens in id order: specials, the sorted alphabet, then merged pieces by rank.

    The alphabet holds every character and, for those seen after a word's first
    character, its "##" form. A word starts as its first character followed by
    the "##" forms of the rest. Each round merges the most frequent adjacent pair (at least
    `min_frequency` occurrences, counted over the corpus) until `vocab_size`
    tokens exist or no pair is frequent enough.
    """
    words = sorted(word_counts.items())  # fixed word order: everything after follows from it
    # every character stands alone (a word may start with it at inference); "##c" where it followed one
    alphabet = sorted({c for w, _ in words for c in w} | {PREFIX + c for w, _ in words for c in w[1:]})
    tokens = list(special_tokens) + [a for a in alphabet if a not in special_tokens]
    ids = {t: i for i, t in enumerate(tokens)}
    symbols = [[ids[c if i == 0 else PREFIX + c] for i, c in enumerate(w)] for w, _ in words]
    freq = [n for _, n in words]

    pair_count: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for wi, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:]):
            pair_count[pair] = pair_count.get(pair, 0) + freq[wi]
            where.setdefault(pair, set()).add(wi)
    # Max-heap on count; among equal counts the smaller (older) ids win. Stale entries are skipped.
    heap = [(-n, a, b) for (a, b), n in pair_count.items()]
    heapq.heapify(heap)

    while len(tokens) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -neg:
            continue  # an outdated count; the current one is further down the heap
        if -neg < min_frequency:
            break
        merged = tokens[a] + tokens[b][len(PREFIX):]
        new = ids.get(merged)
        if new is None:
            new = ids[merged] = len(tokens)
            tokens.append(merged)
        delta: dict[tuple[int, int], int] = {}
        for wi in sorted(where.pop((a, b), ())):
            syms, n, out, i = symbols[wi], freq[wi], [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            if len(out) == len(syms):
                continue
            for pair in zip(syms, syms[1:]):
                delta[pair] = delta.get(pair, 0) - n
            for pair in zip(out, out[1:]):
                delta[pair] = delta.get(pair, 0) + n
                where.setdefault(pair, set()).add(wi)
            symbols[wi] = out
        delta.pop((a, b), None)
        pair_count.pop((a, b), None)
        for pair, d in delta.items():
            if d:  # only the pairs whose count moved get a fresh heap entry
                n = pair_count[pair] = pair_count.get(pair, 0) + d
                if n > 0:
                    heapq.heappush(heap, (-n, *pair))
    return tokens
