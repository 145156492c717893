"""Packing, NSP pairing and `prepare` output, with hand-computed rows over a hand-written vocab."""

import json
import subprocess
import sys

import numpy as np
import pytest

from jaxbert.cli.main import main as cli_main
from jaxbert.data import prepare as prepare_mod
from jaxbert.data.corpus import CorpusError
from jaxbert.data.packing import MLMPacker, fit_pair, nsp_examples, split_sentences
from jaxbert.data.prepare import is_validation, prepare
from jaxbert.data.tokenizer import TokenizerError
from jaxbert.errors import InputError
from tests.helpers.cli import one_line

# [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, a..z = 5..30, ##s=31, ##ing=32, .=33
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["##s", "##ing", "."]
ID = {t: i for i, t in enumerate(VOCAB)}
CLS, SEP, PAD = 2, 3, 0


def ids(text):
    return [ID[t] for t in text.split()]


@pytest.fixture
def vocab(tmp_path):
    path = tmp_path / "tok" / "vocab.txt"
    path.parent.mkdir()
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


def test_mlm_packing_by_hand():
    # body = 4 tokens; stream a b c | d e f g h | i with [SEP] between documents
    p = MLMPacker(6, CLS, SEP, PAD)
    rows = p.add(np.array(ids("a b c d e f g h i")), np.array([3, 5, 1]))
    rows = np.concatenate([rows, p.finish()])
    a, b, c, d, e, f, g, h, i = ids("a b c d e f g h i")
    expected = [[CLS, a, b, c, SEP, SEP],
                [CLS, d, e, f, g, SEP],
                [CLS, h, SEP, i, SEP, PAD]]
    np.testing.assert_array_equal(rows, expected)
    assert p.padding == 1


def test_mlm_packing_drops_separator_at_row_start_and_carries_across_chunks():
    a, b, c, d, e = ids("a b c d e")
    p = MLMPacker(6, CLS, SEP, PAD)
    first = p.add(np.array([a, b]), np.array([2]))   # nothing complete yet
    second = p.add(np.array([c, d, e]), np.array([1, 2]))  # a b | c -> row; d e starts fresh
    assert first.shape == (0, 6)
    np.testing.assert_array_equal(second, [[CLS, a, b, SEP, c, SEP]])
    np.testing.assert_array_equal(p.finish(), [[CLS, d, e, SEP, PAD, PAD]])
    # a document exactly filling a row: the next one opens without a separator
    p = MLMPacker(6, CLS, SEP, PAD)
    rows = np.concatenate([p.add(np.array(ids("a b c d e")), np.array([4, 1])), p.finish()])
    np.testing.assert_array_equal(rows, [[CLS, a, b, c, d, SEP], [CLS, e, SEP, PAD, PAD, PAD]])


def test_long_document_is_split_into_full_rows():
    p = MLMPacker(8, CLS, SEP, PAD)
    tokens = np.arange(5, 5 + 20)
    rows = np.concatenate([p.add(tokens, np.array([20])), p.finish()])
    assert rows.shape == (4, 8)  # 20 tokens in bodies of 6: 6 + 6 + 6 + 2
    np.testing.assert_array_equal(rows[:, 1:-1].ravel()[:20], tokens)
    np.testing.assert_array_equal(rows[3], [CLS, 23, 24, SEP, PAD, PAD, PAD, PAD])


def test_fit_pair_trims_longer_side():
    assert fit_pair(10, 10, 13) == (7, 6)
    assert fit_pair(1, 100, 13) == (1, 12)
    assert fit_pair(20, 3, 13) == (10, 3)
    assert fit_pair(4, 5, 13) == (4, 5)


def test_split_sentences():
    assert split_sentences("One two. Three?  Four\nfive! six") == ["One two.", "Three?", "Four", "five!", "six"]


def test_nsp_pairing_by_hand():
    # 30 documents of two 2-token sentences: doc k = [100+4k, 101+4k] [102+4k, 103+4k]
    docs = [[np.array([100 + 4 * k, 101 + 4 * k]), np.array([102 + 4 * k, 103 + 4 * k])] for k in range(30)]
    rows, a_len, labels = nsp_examples(docs, 10, np.random.default_rng(0), CLS, SEP, PAD, short_seq_prob=0.0,
                                       dtype=np.int64)
    nexts = 0
    for row, la, lab in zip(rows, a_len, labels):
        k, first = divmod(row[1] - 100, 4)  # A is sentence 1 or 2 of document k
        assert la == 2 and row[2] == row[1] + 1 and row[3] == SEP
        if lab == 0:  # the true next sentence, laid out exactly
            assert first == 0
            np.testing.assert_array_equal(row, [CLS, 100 + 4 * k, 101 + 4 * k, SEP, 102 + 4 * k, 103 + 4 * k, SEP,
                                                PAD, PAD, PAD])
            nexts += 1
        else:  # B: another document's sentences from a sentence start to its end (target not reached)
            other, start = divmod(row[4] - 100, 4)
            b = list(range(row[4], 104 + 4 * other))
            assert other != k and start in (0, 2)
            np.testing.assert_array_equal(row, [CLS, row[1], row[2], SEP, *b, SEP] + [PAD] * (5 - len(b)))
    # each document gives a pair starting at sentence 1; a random B puts sentence 2 back, which
    # then forms its own (necessarily random) pair starting with [CLS] 102+4k
    starts = (rows[:, 1] - 100) % 4
    assert (starts == 0).sum() == 30
    assert (starts == 2).sum() == 30 - nexts
    assert 5 < nexts < 25


def test_nsp_truncation_keeps_the_junction():
    docs = [[np.arange(10, 20), np.arange(20, 30)]] * 8
    rows, a_len, labels = nsp_examples(docs, 16, np.random.default_rng(1), CLS, SEP, PAD, short_seq_prob=0.0,
                                       dtype=np.int64)
    assert (labels == 0).sum() >= 2
    for row in rows[labels == 0]:
        # 13 slots for 10 + 10: A keeps its last 7 (front trimmed), B its first 6 (back trimmed)
        np.testing.assert_array_equal(row, [CLS, *range(13, 20), SEP, *range(20, 26), SEP])


def test_prepare_mlm_files_by_hand(vocab, tmp_path):
    (tmp_path / "c.txt").write_text("a b c\n\nd e f g h\n\n\ni\n")
    meta = prepare([str(tmp_path / "c.txt")], vocab, str(tmp_path / "out"), max_length=6,
                   validation_fraction=0.0, progress=False)
    rows = np.load(tmp_path / "out" / "train-00000.npy")
    assert rows.dtype == np.uint16
    a, b, c, d, e, f, g, h, i = ids("a b c d e f g h i")
    np.testing.assert_array_equal(rows, [[CLS, a, b, c, SEP, SEP], [CLS, d, e, f, g, SEP], [CLS, h, SEP, i, SEP, PAD]])
    assert meta["counts"] == {"documents": 3, "tokens": 9, "examples": 3}
    assert meta["splits"]["train"]["padding_tokens"] == 1
    assert meta["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert meta["vocab_size"] == len(VOCAB) and meta["format_version"] == 1 and meta["max_length"] == 6
    assert json.loads((tmp_path / "out" / "metadata.json").read_text()) == meta


def test_validation_split_is_systematic():
    flags = is_validation(np.arange(1000), 0.01)
    assert flags.sum() == 10 and flags[49] and not flags[:49].any()
    assert is_validation(np.arange(10), 0.0).sum() == 0


def test_prepare_is_deterministic_for_any_worker_count(vocab, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    words = VOCAB[5:31]
    sentence = lambda: " ".join(rng.choice(words, rng.integers(1, 8))) + " ."  # noqa: E731
    text = "\n\n".join(" ".join(sentence() for _ in range(rng.integers(1, 6))) for _ in range(300))
    (tmp_path / "c.txt").write_text(text)
    monkeypatch.setattr(prepare_mod, "CHUNK_CHARS", 2000)  # many chunks, so workers share them
    outs = []
    for name, workers in (("one", 1), ("again", 1), ("two", 2)):
        meta = prepare([str(tmp_path / "c.txt")], vocab, str(tmp_path / name), max_length=16, format="nsp",
                       validation_fraction=0.05, num_workers=workers, progress=False)
        files = sorted(p.name for p in (tmp_path / name).iterdir())
        outs.append({f: (tmp_path / name / f).read_bytes() for f in files})
    assert outs[0] == outs[1] == outs[2]
    assert set(outs[0]) == {".jaxbert-output", "metadata.json", "tokenizer.json", "train-00000.npy", "train-00000-pairs.npy",
                            "validation-00000.npy", "validation-00000-pairs.npy"}
    assert meta["splits"]["validation"]["documents"] == 15
    # one-sentence chunks are always paired at random, so a little over half are random
    assert 0.5 < meta["splits"]["train"]["random_next"] / meta["splits"]["train"]["examples"] < 0.8


def test_workers_are_forked_only_from_a_single_threaded_process_without_jax():
    """A fork copies one thread and every lock the others hold: with gcsfs's event loop, Beam's pools or
    JAX running, the pool spawns instead (a child process here: pytest's own process runs threads)."""
    probe = ("import threading, jax.numpy as jnp\n"
             "from jaxbert.data.prepare import _start_method\n"
             "alone = _start_method()\n"
             "stop = threading.Event(); t = threading.Thread(target=stop.wait); t.start()\n"
             "with_thread = _start_method(); stop.set(); t.join()\n"
             "after_thread = _start_method(); jnp.zeros(1).block_until_ready()\n"
             "print(alone, with_thread, after_thread, _start_method())\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["fork", "spawn", "fork", "spawn"]


def test_uint32_shards_for_a_large_vocab(tmp_path):
    big = VOCAB + [f"w{i}" for i in range(70000)]
    (tmp_path / "vocab.txt").write_text("\n".join(big) + "\n")
    (tmp_path / "c.txt").write_text("w69999 a w0\n")
    meta = prepare([str(tmp_path / "c.txt")], str(tmp_path / "vocab.txt"), str(tmp_path / "out"), max_length=8,
                   validation_fraction=0.0, progress=False)
    rows = np.load(tmp_path / "out" / "train-00000.npy")
    assert meta["dtype"] == "uint32" and rows.dtype == np.uint32
    np.testing.assert_array_equal(rows[0, :5], [CLS, len(VOCAB) + 69999, ID["a"], len(VOCAB), SEP])


def test_bad_inputs_are_reported(vocab, tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 a b\n\n\xff\xfe c\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    meta = prepare([str(tmp_path / "bad.txt"), str(tmp_path / "empty.txt")], vocab, str(tmp_path / "out"),
                   max_length=8, validation_fraction=0.0, progress=False)
    bad, empty = meta["sources"]
    assert bad["replaced"] == 3 and bad["documents"] == 2
    assert empty["skipped"] == "empty" and empty["documents"] == 0
    assert any("bad.txt: replaced 3" in w for w in meta["warnings"])
    assert any("empty.txt: skipped" in w for w in meta["warnings"])

    (tmp_path / "blank.txt").write_text("\n  \n\n")
    with pytest.raises(CorpusError, match="empty corpus"):
        prepare([str(tmp_path / "blank.txt")], vocab, str(tmp_path / "o2"), progress=False)
    with pytest.raises(CorpusError, match="not found"):
        prepare([str(tmp_path / "missing.txt")], vocab, str(tmp_path / "o3"), progress=False)
    (tmp_path / "nomask" / "vocab.txt").parent.mkdir()
    (tmp_path / "nomask" / "vocab.txt").write_text("\n".join(t for t in VOCAB if t != "[MASK]"))
    with pytest.raises(TokenizerError, match=r"mask token '\[MASK\]'"):
        prepare([str(tmp_path / "bad.txt")], str(tmp_path / "nomask" / "vocab.txt"), str(tmp_path / "o4"),
                progress=False)
    # a folder of other files is never written over; no partial output is left behind
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.md").write_text("mine")
    with pytest.raises(InputError, match="refusing"):
        prepare([str(tmp_path / "bad.txt")], vocab, str(tmp_path / "keep"), progress=False)
    assert not (tmp_path / "o2").exists() and not list(tmp_path.glob(".o2*"))


def test_cli_prepare_and_inspect(vocab, tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text('{"body": "a b c"}\n{"body": "d e"}\n')
    rc = cli_main(["data", "prepare", "--input", str(tmp_path / "c.jsonl"), "--tokenizer", vocab, "--output",
                   str(tmp_path / "out"), "--max-length", "8", "--text-field", "body", "--validation-fraction",
                   "0", "--quiet"])
    assert rc == 0
    assert "2 documents, 5 tokens -> 1 train and 0 validation rows of 8" in capsys.readouterr().out
    assert cli_main(["data", "inspect", str(tmp_path / "out"), "--rows", "1"]) == 0
    assert "'[CLS] a b c [SEP] d e [SEP]'" in capsys.readouterr().out


def test_a_missing_reader_is_refused_before_any_progress(vocab, tmp_path, capsys, monkeypatch):
    """docs/refusals.md: a refusal comes before any work, so not after a progress line (0 of 4 bytes)."""
    (tmp_path / "docs.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code = cli_main(["data", "prepare", "--input", str(tmp_path / "docs.parquet"), "--tokenizer", vocab,
                     "--output", str(tmp_path / "out")])
    assert code == 2
    one_line(capsys.readouterr(), "data", f"reading {tmp_path / 'docs.parquet'} needs pyarrow", "pip install")
    assert not (tmp_path / "out").exists()
