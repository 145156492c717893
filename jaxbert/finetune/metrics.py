"""Scores for fine-tuning: classification, regression, entity tagging and SQuAD, in NumPy.

Every score is a fraction in [0, 1] (SQuAD's official script prints percentages: multiply by
100 to compare). `compute(names, predictions, references)` evaluates several named metrics at
once and returns one flat dict; `GLUE_METRICS` / `GLUE_MAIN` say which ones each GLUE task
reports and which one picks the best checkpoint.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from jaxbert.errors import InputError


class MetricError(InputError):
    """A metric name is unknown or its predictions and references do not line up."""


# GLUE task -> the metrics its leaderboard reports (MNLI's are computed once per eval set:
# matched and mismatched).
GLUE_METRICS = {
    "cola": ("mcc",), "sst2": ("accuracy",), "mrpc": ("f1", "accuracy"), "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"), "mnli": ("accuracy",), "qnli": ("accuracy",),
    "rte": ("accuracy",), "wnli": ("accuracy",),
}
# GLUE task -> (eval set, metric) that chooses the best checkpoint: the leaderboard's first
# number for the task; MNLI uses the matched set.
GLUE_MAIN = {
    "cola": ("dev", "mcc"), "sst2": ("dev", "accuracy"), "mrpc": ("dev", "f1"), "qqp": ("dev", "f1"),
    "stsb": ("dev", "pearson"), "mnli": ("matched", "accuracy"), "qnli": ("dev", "accuracy"),
    "rte": ("dev", "accuracy"), "wnli": ("dev", "accuracy"),
}
def _pair(predictions, references, name: str) -> tuple[np.ndarray, np.ndarray]:
    p, r = np.asarray(predictions).reshape(-1), np.asarray(references).reshape(-1)
    if p.shape != r.shape:
        raise MetricError(f"{name}: {p.size} predictions for {r.size} references")
    if p.size == 0:
        raise MetricError(f"{name}: no predictions to score")
    return p, r


def accuracy(predictions, references) -> float:
    """Fraction of equal entries; predictions, references [N] (class ids or strings)."""
    p, r = _pair(predictions, references, "accuracy")
    return float(np.mean(p == r))


def f1_binary(predictions, references, positive=1) -> float:
    """F1 of the positive class: 2 TP / (2 TP + FP + FN); 0 when there are no positives at all."""
    p, r = _pair(predictions, references, "f1")
    tp = int(np.sum((p == positive) & (r == positive)))
    fp = int(np.sum((p == positive) & (r != positive)))
    fn = int(np.sum((p != positive) & (r == positive)))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def macro_f1(predictions, references) -> float:
    """Unweighted mean over classes of each class's F1 (one class against the rest), over the
    classes found in the references or the predictions, as scikit-learn's average="macro"."""
    p, r = _pair(predictions, references, "macro_f1")
    return float(np.mean([f1_binary(p, r, positive=c) for c in np.unique(np.concatenate([r, p]))]))


def matthews_corrcoef(predictions, references) -> float:
    """Matthews correlation for any number of classes (Gorodkin's R_K); 0 when undefined.

    From the confusion matrix C (rows true, columns predicted) with t = row sums, p = column
    sums, c = trace, s = total: (c s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t)). For two classes
    this is the familiar (TP TN - FP FN) / sqrt(...).
    """
    p, r = _pair(predictions, references, "mcc")
    classes, index = np.unique(np.concatenate([r, p]), return_inverse=True)
    k, n = len(classes), len(r)
    conf = np.zeros((k, k), dtype=np.float64)
    np.add.at(conf, (index[:n], index[n:]), 1.0)
    t, q = conf.sum(axis=1), conf.sum(axis=0)
    c, s = np.trace(conf), conf.sum()
    denom = (s * s - q @ q) * (s * s - t @ t)
    return float((c * s - t @ q) / math.sqrt(denom)) if denom > 0 else 0.0


def pearson(predictions, references) -> float:
    """Pearson correlation of two float vectors [N]; NaN when either is constant."""
    p, r = _pair(predictions, references, "pearson")
    x, y = p.astype(np.float64) - p.mean(dtype=np.float64), r.astype(np.float64) - r.mean(dtype=np.float64)
    denom = math.sqrt(float(x @ x) * float(y @ y))
    return float(np.clip(float(x @ y) / denom, -1.0, 1.0)) if denom > 0 else float("nan")


def average_ranks(values) -> np.ndarray:
    """1-based ranks of values [N], tied values sharing the mean of the ranks they span."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    order = np.argsort(v, kind="mergesort")
    sorted_v = v[order]
    # boundaries of runs of equal values in sorted order
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    ends = np.r_[starts[1:], len(v)]
    run_rank = (starts + ends + 1) / 2.0  # mean of the ranks starts+1 .. ends
    ranks = np.empty(len(v), dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def spearman(predictions, references) -> float:
    """Spearman correlation: Pearson of the average ranks; NaN when either side is constant."""
    p, r = _pair(predictions, references, "spearman")
    return pearson(average_ranks(p), average_ranks(r))


# --- entity tagging (conlleval / seqeval default mode) ---------------------------------------

def _split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '_'); a bare 'B' has type '_'."""
    return tag[0], (tag[1:].split("-", 1)[-1] or "_")


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The (type, first, last) word spans that a sentence's IOB1 / IOB2 / IOBES tags mark.

    conlleval's rules: a chunk ends before a word when the previous word closed it (E, S), when
    an inside word (B, I) meets B, S or O, or when the type changes; a chunk starts at B or S,
    at I or E after O, E or S, or wherever the type changes. So IOB1's leading I opens a chunk
    and IOB2's I after a different type opens a new one.
    """
    found, start, prev, prev_type = set(), 0, "O", "_"
    for i, tag in enumerate(list(tags) + ["O"]):
        cur, cur_type = _split_tag(tag)
        ends = (prev in "ES" or (prev in "BI" and cur in "BSO")
                or (prev != "O" and prev_type != cur_type))
        if ends:
            found.add((prev_type, start, i - 1))
        if cur in "BS" or (cur in "IE" and prev in "OES") or (cur != "O" and prev_type != cur_type):
            start = i
        prev, prev_type = cur, cur_type
    return found


def entity_scores(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict:
    """Micro precision / recall / F1 over entities; predictions, references: tag lists per sentence."""
    if len(predictions) != len(references):
        raise MetricError(f"entity: {len(predictions)} predicted sentences for {len(references)}")
    correct = n_pred = n_true = 0
    for k, (p, r) in enumerate(zip(predictions, references)):
        if len(p) != len(r):
            raise MetricError(f"entity: sentence {k} has {len(p)} predicted tags for {len(r)} words")
        ep, er = entities(p), entities(r)
        correct, n_pred, n_true = correct + len(ep & er), n_pred + len(ep), n_true + len(er)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_true if n_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"entity_precision": precision, "entity_recall": recall, "entity_f1": f1}


# --- SQuAD --------------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, drop punctuation, drop a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _token_f1(prediction: str, gold: str, empty_matches_empty: bool) -> float:
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if empty_matches_empty and (not p or not g):
        return float(p == g)  # v2.0: "" against "" is a hit, "" against text a miss
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], references: Mapping[str, Iterable[str]],
                 version_2: bool = False) -> dict:
    """Exact match and token F1, each the max over a question's gold answers, averaged.

    predictions: question id -> answer text; references: question id -> gold answer texts.
    A question without a prediction scores 0, as in the official script. v2.0 drops gold
    answers that normalize to nothing, scores a question left with none against [""] (where
    the empty prediction scores 1), and adds HasAns_* / NoAns_* splits, a question counting
    as answerable when it has a non-empty gold text.
    """
    if not references:
        raise MetricError("squad: no reference questions to score")
    exact, f1, has_answer = {}, {}, {}
    for qid, golds in references.items():
        golds = list(golds)
        has_answer[qid] = any(g != "" for g in golds)
        if version_2:
            golds = [g for g in golds if normalize_answer(g)] or [""]
        elif not golds:
            raise MetricError(f"squad: question {qid!r} has no gold answer (SQuAD v2.0 data? use squad_v2)")
        pred = predictions.get(qid)
        if pred is None:
            exact[qid] = f1[qid] = 0.0
            continue
        exact[qid] = max(float(normalize_answer(pred) == normalize_answer(g)) for g in golds)
        f1[qid] = max(_token_f1(pred, g, empty_matches_empty=version_2) for g in golds)
    out = {"exact": float(np.mean(list(exact.values()))), "f1": float(np.mean(list(f1.values()))),
           "total": len(references)}
    if version_2:
        for split, want in (("HasAns", True), ("NoAns", False)):
            ids = [q for q in references if has_answer[q] is want]
            if ids:
                out[f"{split}_exact"] = float(np.mean([exact[q] for q in ids]))
                out[f"{split}_f1"] = float(np.mean([f1[q] for q in ids]))
            out[f"{split}_total"] = len(ids)
    return out


_SCALAR: dict[str, Callable] = {"accuracy": accuracy, "f1": f1_binary, "macro_f1": macro_f1, "mcc": matthews_corrcoef,
                                "pearson": pearson, "spearman": spearman}
METRIC_NAMES = tuple(_SCALAR) + ("entity", "squad", "squad_v2")


def compute(names: Iterable[str], predictions, references) -> dict:
    """Evaluate each named metric on the same predictions and references; one flat dict.

    Scalar metrics (accuracy, f1, macro_f1, mcc, pearson, spearman) add their own name; "entity" adds
    entity_precision / entity_recall / entity_f1; "squad" / "squad_v2" add exact, f1, total
    (and the HasAns / NoAns splits).
    """
    out = {}
    for name in names:
        if name in _SCALAR:
            out[name] = _SCALAR[name](predictions, references)
        elif name == "entity":
            out.update(entity_scores(predictions, references))
        elif name in ("squad", "squad_v2"):
            out.update(squad_scores(predictions, references, version_2=name == "squad_v2"))
        else:
            raise MetricError(f"unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}")
    return out
