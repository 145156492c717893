"""MLMLoader: batch fields, exact resume, host sharding over 2 and 3 simulated hosts, compatibility."""

import numpy as np
import pytest

from jaxbert.data.loader import (DataCompatibilityError, MLMLoader, check_compatible, continuation_table,
                                  metadata)
from jaxbert.data.prepare import prepare

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["##s", "##ing", "."]
PAD, CLS, SEP, MASK = 0, 2, 3, 4


def _corpus(path, n_docs, seed=0):
    rng = np.random.default_rng(seed)
    words = [w + rng.choice(["", "s", "ing"], p=[0.6, 0.3, 0.1]) for w in rng.choice(VOCAB[5:31], 20000)]
    docs, i = [], 0
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.integers(1, 5)):
            k = int(rng.integers(1, 8))
            sentences.append(" ".join(words[i:i + k]) + " .")
            i += k
        docs.append(" ".join(sentences))
    path.write_text("\n\n".join(docs) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    (root / "tok").mkdir()
    (root / "tok" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    _corpus(root / "c.txt", 400)
    tok = str(root / "tok" / "vocab.txt")
    prepare([str(root / "c.txt")], tok, str(root / "mlm"), max_length=16, validation_fraction=0.1, progress=False)
    prepare([str(root / "c.txt")], tok, str(root / "nsp"), max_length=16, format="nsp", validation_fraction=0.1,
            progress=False)
    return root


def _rows(data_dir, split="train"):
    meta = metadata(data_dir)
    return np.concatenate([np.load(f"{data_dir}/{s['file']}") for s in meta["splits"][split]["shards"]])


def _unmasked(batch):
    """Reconstruct the original rows by putting the labels back at the masked positions."""
    ids = batch["input_ids"].copy()
    b, m = np.nonzero(batch["masked_weights"])
    ids[b, batch["masked_positions"][b, m]] = batch["masked_labels"][b, m]
    return ids


def test_batch_fields(data):
    loader = MLMLoader(data / "mlm", 8, 16)
    batch = next(loader)
    assert {k: (v.shape, v.dtype.name) for k, v in batch.items()} == {
        "input_ids": ((8, 16), "int32"), "token_type_ids": ((8, 16), "int32"), "attention_mask": ((8, 16), "int32"),
        "masked_positions": ((8, 8), "int32"), "masked_labels": ((8, 8), "int32"),
        "masked_weights": ((8, 8), "float32")}
    rows = _rows(data / "mlm")[loader.example_indices(0)]
    np.testing.assert_array_equal(_unmasked(batch), rows)
    np.testing.assert_array_equal(batch["attention_mask"], rows != PAD)
    assert not batch["token_type_ids"].any()
    assert loader.state() == {"epoch": 0, "offset": 8, "seed": 0, "examples": loader.num_examples}


def test_exact_resume(data):
    ref = MLMLoader(data / "mlm", 8, seed=3)
    spe = ref.steps_per_epoch
    batches = [next(ref) for _ in range(spe + 5)]  # crosses an epoch boundary
    cut = spe - 2
    resumed = MLMLoader(data / "mlm", 8, seed=3, state=ref.state(step=cut))
    restored = MLMLoader(data / "mlm", 8, seed=3)
    restored.restore({"step": cut, "epoch": 0, "seed": 3, "global_batch_size": 8})  # a state from before positions
    for want in batches[cut:]:
        for got in (next(resumed), next(restored)):
            for k in want:
                np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_array_equal(ref.batch_at(4)["input_ids"], batches[4]["input_ids"])
    with pytest.raises(DataCompatibilityError, match="train.seed: 3 in the checkpoint, 4 now"):
        MLMLoader(data / "mlm", 8, seed=4, state=ref.state())
    with pytest.raises(DataCompatibilityError, match="the prepared data changed"):
        MLMLoader(data / "mlm", 8, seed=3, state={**ref.state(), "examples": ref.num_examples + 1})


@pytest.mark.parametrize("before,after", [(8, 4), (4, 12), (6, 8)])
def test_resume_with_another_global_batch_continues_the_same_stream(data, before, after):
    # the sequences (and their masks) of a run that changes its global batch midway, across an
    # epoch boundary, are those of an uninterrupted run: the position is sequences consumed
    first = MLMLoader(data / "mlm", before, seed=5)
    N = first.num_examples
    rows_before = [next(first) for _ in range(N // before - 3)]
    second = MLMLoader(data / "mlm", after, seed=5, state=first.state())
    rows_after = [next(second) for _ in range(6 + N // after)]  # into the second epoch and the third
    got = {k: np.concatenate([b[k] for b in rows_before + rows_after]) for k in rows_before[0]}
    straight = MLMLoader(data / "mlm", 1, seed=5)
    want = [next(straight) for _ in range(len(got["input_ids"]))]
    for k in got:
        np.testing.assert_array_equal(got[k], np.concatenate([b[k] for b in want]))
    index, epochs = straight.stream(0, 2 * N)  # each example once per epoch
    for e in (0, 1):
        assert sorted(index[epochs == e]) == list(range(N))


@pytest.mark.parametrize("hosts", [2, 3])
def test_host_sharding_covers_each_epoch_exactly_once(data, hosts):
    B = 12 // hosts
    loaders = [MLMLoader(data / "mlm", B, seed=1, process_index=p, process_count=hosts) for p in range(hosts)]
    single = MLMLoader(data / "mlm", 12, seed=1)
    N, spe = single.num_examples, single.steps_per_epoch
    assert all(l.steps_per_epoch == spe == N // 12 for l in loaders)
    rows = _rows(data / "mlm")
    seen = []
    for step in range(-(-2 * N // 12)):  # two epochs and a bit
        parts = [l.batch_at(step) for l in loaders]
        index = [l.example_indices(step) for l in loaders]
        seen += [i for ix in index for i in ix]
        whole = single.batch_at(step)  # the hosts' shares make up the single-host batch exactly
        for k in whole:
            np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), whole[k])
        for p, ix in zip(parts, index):
            np.testing.assert_array_equal(_unmasked(p), rows[ix])
    for epoch in range(2):
        assert sorted(seen[epoch * N:(epoch + 1) * N]) == list(range(N))
    # epochs are shuffled differently
    assert not np.array_equal(seen[:N], seen[N:2 * N])


def test_dynamic_and_fixed_masking(data):
    def masks_by_example(loader, epoch):
        out = {}
        for step in range(epoch * loader.steps_per_epoch, (epoch + 1) * loader.steps_per_epoch):
            b = loader.batch_at(step)
            for i, ex in enumerate(loader.example_indices(step)):
                out[int(ex)] = b["input_ids"][i]
        return out

    dyn, fixed = MLMLoader(data / "mlm", 8), MLMLoader(data / "mlm", 8, fixed_masking=True)
    d0, d1 = masks_by_example(dyn, 0), masks_by_example(dyn, 1)
    f0, f1 = masks_by_example(fixed, 0), masks_by_example(fixed, 1)
    common = sorted(set(d0) & set(d1))
    assert len(common) > 50
    assert all(np.array_equal(f0[i], f1[i]) for i in common)
    assert sum(np.array_equal(d0[i], d1[i]) for i in common) < len(common) // 4


def test_whole_word_masking_in_the_loader(data):
    table = continuation_table(data / "mlm", len(VOCAB))
    assert list(np.flatnonzero(table)) == [31, 32]
    loader = MLMLoader(data / "mlm", 32, whole_word_mask=True, mask_rate=0.3)
    assert loader.max_predictions == 8  # ceil(0.3 * 16 * 1.5) = 8
    for step in range(3):
        b = loader.batch_at(step)
        chosen = np.zeros(b["input_ids"].shape, bool)
        r, m = np.nonzero(b["masked_weights"])
        chosen[r, b["masked_positions"][r, m]] = True
        orig = _unmasked(b)
        follows = table[orig[:, 1:]] & (orig[:, :-1] != CLS)  # a ## piece after a real token
        assert np.array_equal(chosen[:, 1:][follows], chosen[:, :-1][follows])


def test_nsp_batches(data):
    loader = MLMLoader(data / "nsp", 8)
    b = loader.batch_at(0)
    idx = loader.example_indices(0)
    meta = metadata(data / "nsp")
    pairs = np.load(data / "nsp" / meta["splits"]["train"]["shards"][0]["file"].replace(".npy", "-pairs.npy"))[idx]
    np.testing.assert_array_equal(b["next_sentence_labels"], pairs[:, 1])
    assert b["next_sentence_labels"].dtype == np.int32
    orig = _unmasked(b)
    for row, tt, (la, _) in zip(orig, b["token_type_ids"], pairs):
        n = int((row != PAD).sum())
        expected = [0] * (la + 2) + [1] * (n - la - 2) + [0] * (16 - n)
        np.testing.assert_array_equal(tt, expected)
        assert row[0] == CLS and row[la + 1] == SEP and row[n - 1] == SEP


def test_compatibility_checks(data):
    digest = metadata(data / "mlm")["tokenizer_hash"]
    meta = check_compatible(data / "mlm", vocab_size=len(VOCAB), tokenizer_hash=digest)
    assert meta["vocab_size"] == 34
    check_compatible(data / "mlm", vocab_size=40)  # padded to a multiple of 8
    with pytest.raises(DataCompatibilityError, match="34-token vocabulary.*vocab_size 30522"):
        check_compatible(data / "mlm", vocab_size=30522)
    with pytest.raises(DataCompatibilityError, match="differs from the model's"):
        check_compatible(data / "mlm", tokenizer_hash="0" * 64)
    with pytest.raises(DataCompatibilityError, match="rows of 16 tokens, not 128"):
        MLMLoader(data / "mlm", 8, 128)
    with pytest.raises(DataCompatibilityError, match="fewer than one global batch"):
        MLMLoader(data / "mlm", 4096)
    with pytest.raises(DataCompatibilityError, match="not a prepared dataset"):
        metadata(data / "tok")
