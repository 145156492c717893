"""Embedding evaluation: retrieval over a pooled corpus and STS-style correlation.

``retrieval`` scores every query against every corpus embedding (cosine) and reports, as
sentence-transformers' InformationRetrievalEvaluator defines them: recall@1 / recall@10 (the share of
a query's relevant documents in its top k, averaged over queries), MRR@10 (1 / rank of the first
relevant document within the top 10, else 0) and nDCG@10 (binary gains, log2 discount, against the
ideal ordering of the query's relevant documents). ``sts_spearman`` is the Spearman correlation of
the cosine of each pair with its gold score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def retrieval(queries: np.ndarray, corpus: np.ndarray, relevant: Sequence[set], k: int = 10) -> dict:
    """{recall@1, recall@10, mrr@10, ndcg@10} of queries [Q, D] against corpus [M, D]; relevant[q]: the
    corpus indices relevant to query q (at least one each)."""
    scores = _unit(queries) @ _unit(corpus).T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    r1, rk, mrr, ndcg = [], [], [], []
    for q, rel in enumerate(relevant):
        hits = np.array([int(d) in rel for d in top[q]], np.float64)
        r1.append(hits[:1].sum() / len(rel))
        rk.append(hits.sum() / len(rel))
        first = np.flatnonzero(hits)
        mrr.append(1.0 / (first[0] + 1) if len(first) else 0.0)
        discount = 1.0 / np.log2(np.arange(2, k + 2))
        ideal = discount[:min(len(rel), k)].sum()
        ndcg.append(float((hits * discount[:len(hits)]).sum() / ideal))
    return {"recall@1": float(np.mean(r1)), f"recall@{k}": float(np.mean(rk)), f"mrr@{k}": float(np.mean(mrr)),
            f"ndcg@{k}": float(np.mean(ndcg))}


def pooled_corpus(rows: Sequence[Sequence[str]]) -> tuple[list[str], list[set]]:
    """Rows (anchor, positive, negatives...) -> (the corpus of every distinct positive and negative text,
    each row's relevant corpus indices: its positive)."""
    index: dict[str, int] = {}
    for row in rows:
        for text in row[1:]:
            index.setdefault(text, len(index))
    return list(index), [{index[row[1]]} for row in rows]


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2.0)[inverse]


def sts_spearman(a: np.ndarray, b: np.ndarray, gold: Sequence[float]) -> float:
    """Spearman correlation of cos(a_i, b_i) with gold_i: Pearson's of their ranks."""
    cos = np.sum(_unit(a) * _unit(b), axis=-1)
    x, y = _ranks(cos), _ranks(np.asarray(gold, np.float64))
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))
