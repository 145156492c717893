"""Masking: rates within binomial bounds, 80/10/10, specials never masked, whole words, hand cases."""

import numpy as np

from jaxbert.data.masking import mask_tokens, masked_slots, row_keys

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
V = 40
NEVER = np.zeros(V, bool)
NEVER[[CLS, SEP, PAD]] = True
RANDOM_IDS = np.arange(5, V)
CONT = np.zeros(V, bool)
CONT[[31, 32]] = True  # "##s", "##ing"


def _mask(ids, keys, rate, M, **kw):
    return mask_tokens(ids, keys, mask_rate=rate, mask_id=MASK, never_mask=NEVER, random_ids=RANDOM_IDS,
                       max_predictions=M, **kw)


def _rows(n, rng):
    """[CLS] 50 tokens [SEP] 11 tokens [SEP] [PAD]: 61 maskable positions."""
    ids = rng.integers(5, V, (n, 65))
    ids[:, 0], ids[:, 51], ids[:, 63], ids[:, 64] = CLS, SEP, SEP, PAD
    return ids


def _chosen(out, L):
    """bool [B, L] of the positions with a real prediction."""
    B = out["masked_positions"].shape[0]
    chosen = np.zeros((B, L), bool)
    rows = np.repeat(np.arange(B), out["masked_positions"].shape[1])
    live = out["masked_weights"].ravel() > 0
    chosen[rows[live], out["masked_positions"].ravel()[live]] = True
    return chosen


def test_masked_slots():
    assert masked_slots(128, 0.15) == 24
    assert masked_slots(512, 0.15) == 80
    assert masked_slots(128, 0.15, whole_word_mask=True) == 32
    assert masked_slots(128, 0.0) == 8
    assert masked_slots(128, 0.15, max_predictions=20) == 20


def test_rates_within_binomial_bounds():
    N, rate, n = 4000, 0.15, 61
    rng = np.random.default_rng(0)
    ids = _rows(N, rng)
    out = _mask(ids, row_keys(0, 0, np.arange(N)), rate, 24)
    chosen = _chosen(out, 65)
    # per row: floor(rate * n + u) tokens, so 9 or 10 and 9.15 on average
    per_row = chosen.sum(1)
    assert set(np.unique(per_row)) == {9, 10}
    sd = np.sqrt(N * 0.15 * 0.85)
    assert abs(per_row.sum() - N * rate * n) < 5 * sd
    # per position: chosen with probability `rate`, binomial over N draws
    maskable = ~NEVER[ids]
    counts = chosen[:, maskable[0]].sum(0)
    assert np.all(np.abs(counts - N * rate) < 5 * np.sqrt(N * rate * (1 - rate)))
    # 80/10/10 among the chosen tokens (a random id equals the original 1 time in 35)
    total = chosen.sum()
    became = out["input_ids"][chosen]
    orig = ids[chosen]
    fractions = {"mask": np.mean(became == MASK), "random": np.mean((became != MASK) & (became != orig)),
                 "kept": np.mean(became == orig)}
    expected = {"mask": 0.8, "random": 0.1 * 34 / 35, "kept": 0.1 + 0.1 / 35}
    for k, p in expected.items():
        assert abs(fractions[k] - p) < 5 * np.sqrt(p * (1 - p) / total), (k, fractions[k], p)
    # random replacements come from every non-special id, never a special one
    replaced = became[(became != MASK) & (became != orig)]
    assert set(np.unique(replaced)) == set(RANDOM_IDS)
    # labels are the original ids at the positions; nothing else changed
    np.testing.assert_array_equal(out["masked_labels"][out["masked_weights"] > 0], ids[chosen])
    np.testing.assert_array_equal(out["input_ids"][~chosen], ids[~chosen])


def test_any_rate_from_zero_to_one():
    rng = np.random.default_rng(1)
    ids = _rows(200, rng)
    keys = row_keys(3, 0, np.arange(200))
    none = _mask(ids, keys, 0.0, 8)
    assert none["masked_weights"].sum() == 0 and np.array_equal(none["input_ids"], ids)
    everything = _mask(ids, keys, 1.0, 64, replace_rate=1.0, random_rate=0.0)
    np.testing.assert_array_equal(_chosen(everything, 65), ~NEVER[ids])
    np.testing.assert_array_equal(everything["input_ids"], np.where(NEVER[ids], ids, MASK))
    half = _chosen(_mask(ids, keys, 0.5, 32), 65).sum(1)
    assert set(np.unique(half)) == {30, 31}  # floor(30.5 + u)


def test_special_tokens_never_masked():
    rng = np.random.default_rng(2)
    ids = rng.integers(5, V, (3000, 32))
    specials = rng.random(ids.shape) < 0.3
    ids[specials] = rng.choice([CLS, SEP, PAD], specials.sum())
    out = _mask(ids, row_keys(5, 7, np.arange(3000)), 0.4, 16)
    chosen = _chosen(out, 32)
    assert chosen.sum() > 10000
    assert not (chosen & specials).any()
    np.testing.assert_array_equal(out["input_ids"][specials], ids[specials])
    # positions ascend within each row, and empty slots follow the real ones
    pos, w = out["masked_positions"], out["masked_weights"]
    assert np.all(np.diff(pos, axis=1)[w[:, 1:] > 0] > 0)
    assert np.all(np.diff(w, axis=1) <= 0)


def test_whole_word_masking_by_hand():
    a, s, b = 5, 31, 6
    ids = np.array([[CLS, a, s, b, SEP, PAD]])
    out = _mask(ids, row_keys(0, 0, np.arange(1)), 1.0, 8, continuation=CONT, replace_rate=1.0, random_rate=0.0)
    np.testing.assert_array_equal(out["input_ids"], [[CLS, MASK, MASK, MASK, SEP, PAD]])
    np.testing.assert_array_equal(out["masked_positions"], [[1, 2, 3, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(out["masked_labels"], [[a, s, b, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(out["masked_weights"], [[1, 1, 1, 0, 0, 0, 0, 0]])


def test_whole_words_masked_together():
    rng = np.random.default_rng(3)
    N, L = 3000, 48
    ids = rng.integers(5, 31, (N, L))
    ids[rng.random((N, L)) < 0.35] = 31  # continuations; runs of them extend a word
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[:, 1] = 32  # a continuation right after [CLS] opens a word of its own
    out = _mask(ids, row_keys(1, 0, np.arange(N)), 0.15, 16, continuation=CONT)
    chosen = _chosen(out, L)
    word = np.cumsum(~CONT[ids] | (np.arange(L) == 1), axis=1)  # word number of each token
    for r in range(200):
        for w in np.unique(word[r, 1:-1]):
            members = chosen[r][(word[r] == w) & ~NEVER[ids[r]]]
            assert members.all() or not members.any()
    # the expected number of masked tokens is still rate * maskable tokens
    n = L - 2
    assert abs(chosen.sum(1).mean() - 0.15 * n) < 0.2
    assert chosen.sum(1).max() <= 16


def test_whole_word_overflow_keeps_whole_words_within_m():
    w = [5, 31, 31]  # three-token words
    ids = np.array([[CLS] + w * 4 + [SEP]] * 50)
    out = _mask(ids, row_keys(0, 0, np.arange(50)), 1.0, 8, continuation=CONT)
    chosen = _chosen(out, ids.shape[1])
    assert np.all(chosen.sum(1) == 6)  # two whole words fit in 8 slots, a third would not
    words = chosen[:, 1:-1].reshape(50, 4, 3)
    assert np.all(words.all(2) | ~words.any(2))
    assert len({tuple(r) for r in words.all(2)}) > 1  # which words survive varies


def test_masking_is_a_function_of_the_keys():
    rng = np.random.default_rng(4)
    ids = _rows(64, rng)
    k = row_keys(9, 2, np.arange(100, 164))
    a, b = _mask(ids, k, 0.15, 24), _mask(ids, k.copy(), 0.15, 24)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    other = _mask(ids, row_keys(9, 3, np.arange(100, 164)), 0.15, 24)
    assert not np.array_equal(a["masked_positions"], other["masked_positions"])
    # a row's masking does not depend on its neighbours in the batch
    single = _mask(ids[5:6], k[5:6], 0.15, 24)
    np.testing.assert_array_equal(single["input_ids"][0], a["input_ids"][5])
