"""jaxbert.finetune.metrics against implementations that share no code with it: scikit-learn,
scipy.stats, seqeval (or entity sets written out by hand) and the official SQuAD logic restated here."""

from __future__ import annotations

import collections
import math
import re
import string
import warnings

import numpy as np
import pytest

from jaxbert.finetune import metrics as M

sk = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")


def _random_labels(rng, n, k):
    return rng.integers(0, k, n), rng.integers(0, k, n)


# --- classification / regression -----------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_classification_metrics_match_sklearn_on_random_labels(seed):
    rng = np.random.default_rng(seed)
    for k in (2, 3, 5):
        p, r = _random_labels(rng, int(rng.integers(1, 60)), k)
        assert M.accuracy(p, r) == pytest.approx(sk.accuracy_score(r, p))
        assert M.matthews_corrcoef(p, r) == pytest.approx(sk.matthews_corrcoef(r, p), abs=1e-12)
        if k == 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert M.f1_binary(p, r) == pytest.approx(sk.f1_score(r, p, zero_division=0))


@pytest.mark.parametrize("p, r", [
    ([1, 1, 1], [1, 1, 1]),            # all one class: MCC undefined -> 0
    ([0, 0, 0, 0], [0, 1, 0, 1]),      # constant prediction
    ([0, 0], [0, 0]),                  # no positives anywhere: F1 0
    ([1, 0, 1, 0], [0, 1, 0, 1]),      # perfectly wrong: MCC -1
    ([2, 0, 1, 2, 2], [2, 0, 1, 1, 0]),
    (["b", "a", "a"], ["a", "a", "b"]),
])
def test_classification_metrics_match_sklearn_on_edge_cases(p, r):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert M.accuracy(p, r) == pytest.approx(sk.accuracy_score(r, p))
        assert M.matthews_corrcoef(p, r) == pytest.approx(sk.matthews_corrcoef(r, p), abs=1e-12)
        if set(p) | set(r) <= {0, 1}:
            assert M.f1_binary(p, r) == pytest.approx(sk.f1_score(r, p, zero_division=0))


@pytest.mark.parametrize("seed", range(6))
def test_correlations_match_scipy_with_and_without_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 80))
    x, y = rng.normal(size=n), rng.normal(size=n)
    tied_x, tied_y = rng.integers(0, 4, n).astype(float), np.round(y, 0)  # many ties
    for a, b in ((x, y), (tied_x, tied_y), (x, 2 * x + 1), (tied_x, x)):
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            continue
        assert M.pearson(a, b) == pytest.approx(stats.pearsonr(b, a)[0], abs=1e-12)
        assert M.spearman(a, b) == pytest.approx(stats.spearmanr(b, a)[0], abs=1e-12)


def test_average_ranks_match_scipy_and_constant_correlation_is_nan():
    v = [3.0, 1.0, 3.0, 2.0, 1.0, 3.0]
    np.testing.assert_allclose(M.average_ranks(v), stats.rankdata(v, method="average"))
    assert math.isnan(M.pearson([1, 1, 1], [1, 2, 3])) and math.isnan(M.spearman([1, 2, 3], [5, 5, 5]))


def test_length_mismatch_and_unknown_metric_are_one_line_errors():
    with pytest.raises(M.MetricError, match="2 predictions for 3 references"):
        M.accuracy([1, 0], [1, 0, 1])
    with pytest.raises(M.MetricError, match="unknown metric 'bleu'"):
        M.compute(["bleu"], [1], [1])


def test_compute_merges_named_metrics_and_glue_tables_agree():
    out = M.compute(["f1", "accuracy"], [1, 0, 1, 1], [1, 0, 0, 1])
    assert out == {"f1": pytest.approx(0.8), "accuracy": 0.75}
    assert set(M.GLUE_METRICS) == set(M.GLUE_MAIN)
    for task, (_, main) in M.GLUE_MAIN.items():
        assert main in M.GLUE_METRICS[task]
    assert M.GLUE_MAIN["cola"] == ("dev", "mcc") and M.GLUE_MAIN["mnli"] == ("matched", "accuracy")


# --- entity tagging -------------------------------------------------------------------------

# (gold sentences, predicted sentences, gold entities by hand, predicted entities by hand)
HAND = [
    # IOB2: B starts, I continues
    ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]],
     {("PER", 0, 1), ("LOC", 3, 3)}, {("PER", 0, 1), ("ORG", 3, 3)}),
    # IOB1: a chunk may start with I; B only splits two adjacent chunks of one type
    ([["I-PER", "I-PER", "B-PER", "O", "I-LOC"]], [["I-PER", "I-PER", "I-PER", "O", "I-LOC"]],
     {("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)}, {("PER", 0, 2), ("LOC", 4, 4)}),
    # type change inside a run of I opens a new chunk; I after O opens one too
    ([["B-PER", "I-LOC", "I-LOC", "O", "I-PER"]], [["B-PER", "I-PER", "I-LOC", "O", "O"]],
     {("PER", 0, 0), ("LOC", 1, 2), ("PER", 4, 4)}, {("PER", 0, 1), ("LOC", 2, 2)}),
    # plain O only, and entities do not run across a sentence boundary
    ([["O", "O"], ["I-MISC"], ["O"]], [["O", "B-MISC"], ["I-MISC"], ["O"]],
     {("MISC", 0, 0)}, {("MISC", 1, 1), ("MISC", 0, 0)}),
]


def _expected_scores(gold_sets, pred_sets):
    correct = sum(len(g & p) for g, p in zip(gold_sets, pred_sets))
    n_pred, n_true = sum(map(len, pred_sets)), sum(map(len, gold_sets))
    prec = correct / n_pred if n_pred else 0.0
    rec = correct / n_true if n_true else 0.0
    return prec, rec, (2 * prec * rec / (prec + rec) if prec + rec else 0.0)


@pytest.mark.parametrize("gold, pred, gold_ents, pred_ents", HAND)
def test_entities_match_hand_written_sets(gold, pred, gold_ents, pred_ents):
    # the hand-written sets are per sentence in the first three cases; the fourth lists the
    # entities of sentence 2 (index 0 there) and sentence 1 separately
    if len(gold) == 1:
        assert M.entities(gold[0]) == gold_ents and M.entities(pred[0]) == pred_ents
    else:
        assert M.entities(gold[0]) == set() and M.entities(gold[1]) == gold_ents
        assert M.entities(pred[0]) == {("MISC", 1, 1)} and M.entities(pred[1]) == {("MISC", 0, 0)}
    got = M.entity_scores(pred, gold)
    want = _expected_scores([M.entities(s) for s in gold], [M.entities(s) for s in pred])
    assert (got["entity_precision"], got["entity_recall"], got["entity_f1"]) == pytest.approx(want)


def _random_tags(rng, n, scheme):
    out, types = [], ["PER", "LOC", "ORG"]
    for _ in range(n):
        r = rng.random()
        if r < 0.45:
            out.append("O")
        else:
            prefix = "I" if scheme == "iob1" and rng.random() < 0.8 else rng.choice(["B", "I"])
            out.append(f"{prefix}-{rng.choice(types)}")
    return out


@pytest.mark.parametrize("scheme", ["iob1", "iob2"])
def test_entity_scores_match_seqeval_on_random_tags(scheme):
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = np.random.default_rng(0 if scheme == "iob1" else 1)
    for _ in range(30):
        lengths = rng.integers(1, 12, rng.integers(1, 6))
        gold = [_random_tags(rng, int(n), scheme) for n in lengths]
        pred = [_random_tags(rng, int(n), scheme) for n in lengths]
        got = M.entity_scores(pred, gold)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert got["entity_precision"] == pytest.approx(seqeval.precision_score(gold, pred))
            assert got["entity_recall"] == pytest.approx(seqeval.recall_score(gold, pred))
            assert got["entity_f1"] == pytest.approx(seqeval.f1_score(gold, pred))


def test_entity_scores_match_seqeval_on_hand_cases():
    seqeval = pytest.importorskip("seqeval.metrics")
    for gold, pred, *_ in HAND:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert M.entity_scores(pred, gold)["entity_f1"] == pytest.approx(seqeval.f1_score(gold, pred))


# --- SQuAD: the official v1.1 / v2.0 evaluation logic, restated ------------------------------

def official_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1_v1(prediction, ground_truth):
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_f1_v2(a_gold, a_pred):
    gold_toks = official_normalize_answer(a_gold).split()
    pred_toks = official_normalize_answer(a_pred).split()
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    return official_f1_v1(a_pred, a_gold)


def official_exact(prediction, ground_truth):
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_v1(dataset, predictions):
    f1 = exact_match = total = 0
    for qid, golds in dataset.items():
        total += 1
        if qid not in predictions:
            continue
        exact_match += max(official_exact(predictions[qid], g) for g in golds)
        f1 += max(official_f1_v1(predictions[qid], g) for g in golds)
    return {"exact": exact_match / total, "f1": f1 / total}


def official_v2(dataset, preds):
    exact, f1, has = {}, {}, {}
    for qid, answers in dataset.items():
        has[qid] = bool([a for a in answers if a])
        gold = [a for a in answers if official_normalize_answer(a)] or [""]
        exact[qid] = max(int(official_exact(preds[qid], a)) for a in gold)
        f1[qid] = max(official_f1_v2(a, preds[qid]) for a in gold)
    out = {"exact": np.mean(list(exact.values())), "f1": np.mean(list(f1.values()))}
    for name, ids in (("HasAns", [q for q in has if has[q]]), ("NoAns", [q for q in has if not has[q]])):
        out[f"{name}_exact"] = np.mean([exact[q] for q in ids])
        out[f"{name}_f1"] = np.mean([f1[q] for q in ids])
    return out


def test_normalize_answer_matches_official_on_tricky_strings():
    for s in ["The Eiffel  Tower!", "an apple a day", "theatre THE", "  A-B, c.d  ", "Ünïcode — the ‘quote’",
              "thean", "", "the"]:
        assert M.normalize_answer(s) == official_normalize_answer(s)


def test_squad_v1_matches_official():
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "Cat,", "an", "dog.", "Mat"]
    refs, preds = {}, {}
    for i in range(60):
        refs[f"q{i}"] = [" ".join(rng.choice(words, rng.integers(1, 5))) for _ in range(rng.integers(1, 4))]
        if i % 7:  # some questions unanswered: they score 0
            preds[f"q{i}"] = " ".join(rng.choice(words, rng.integers(0, 5)))
    preds["q1"] = refs["q1"][-1]
    got = M.compute(["squad"], preds, refs)
    want = official_v1(refs, preds)
    assert got["exact"] == pytest.approx(want["exact"]) and got["f1"] == pytest.approx(want["f1"])
    assert got["total"] == 60


def test_squad_v2_matches_official_with_unanswerable_questions():
    refs = {"a": ["Denver Broncos", "the Broncos"], "b": [], "c": [""], "d": ["Paris"], "e": []}
    preds = {"a": "Broncos", "b": "", "c": "something", "d": "", "e": ""}
    got = M.compute(["squad_v2"], preds, refs)
    want = official_v2(refs, preds)
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key
    assert got["HasAns_total"] == 2 and got["NoAns_total"] == 3
    assert got["NoAns_exact"] == pytest.approx(2 / 3)  # "" on b and e scores 1, "something" on c 0


def test_squad_v1_refuses_a_question_without_gold_answers():
    with pytest.raises(M.MetricError, match="question 'x' has no gold answer"):
        M.squad_scores({"x": ""}, {"x": []})


def test_macro_f1_is_the_mean_of_per_class_f1():
    from jaxbert.finetune.metrics import f1_binary, macro_f1
    p, r = [0, 1, 2, 2, 1, 0], [0, 1, 1, 2, 2, 2]
    assert macro_f1(p, r) == pytest.approx(sum(f1_binary(p, r, positive=c) for c in (0, 1, 2)) / 3)
    assert macro_f1([1, 1], [1, 1]) == 1.0
