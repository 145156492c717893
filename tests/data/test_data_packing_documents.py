"""`packing: documents` and `none`: whole documents in rows with segment ids, by hand and on a
made corpus of short documents; the loader's segment ids, masking, resume and compatibility."""

import json

import numpy as np
import pytest

from jaxbert.data.loader import DataCompatibilityError, MLMLoader, check_compatible, metadata
from jaxbert.data.packing import DocumentPacker
from jaxbert.data.prepare import PrepareError, prepare

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["##s", "##ing", "."]
ID = {t: i for i, t in enumerate(VOCAB)}
PAD, CLS, SEP = 0, 2, 3


def ids(text):
    return [ID[t] for t in text.split()]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


def test_document_packing_by_hand():
    a, b, c, d, e, f, g, h, i = ids("a b c d e f g h i")
    p = DocumentPacker(8, CLS, SEP, PAD, open_rows=1)
    # documents: [a b] [c d e] [f] [g h i j k l m n] (8 tokens: two pieces of 6 and 2)
    toks = np.array(ids("a b c d e f g h i j k l m n"))
    rows, segs = p.add(toks, np.array([2, 3, 1, 8]))
    more_rows, more_segs = p.finish()
    rows, segs = np.concatenate([rows, more_rows]), np.concatenate([segs, more_segs])
    j, k, l, m, n = ids("j k l m n")
    np.testing.assert_array_equal(rows, [
        [CLS, a, b, SEP, PAD, PAD, PAD, PAD],          # [c d e] (5) does not fit beside [a b] (4) ... 
        [CLS, c, d, e, SEP, CLS, f, SEP],               # ... but [f] (3) fits beside it
        [CLS, g, h, i, j, k, l, SEP],                   # the long document's first piece fills a row
        [CLS, m, n, SEP, PAD, PAD, PAD, PAD]])
    np.testing.assert_array_equal(segs, [
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 2, 2, 2],
        [1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 0, 0, 0, 0]])
    assert p.padding == 8 and p.pieces == 5
    # first fit over open rows: with two open rows [f] goes back to the first one
    p = DocumentPacker(8, CLS, SEP, PAD, open_rows=2)
    rows, segs = p.add(np.array(ids("a b c d e f")), np.array([2, 3, 1]))
    # the first row, with 1 token left (less than [CLS] x [SEP]), closes at once
    np.testing.assert_array_equal(rows, [[CLS, a, b, SEP, CLS, f, SEP, PAD]])
    np.testing.assert_array_equal(segs, [[1, 1, 1, 1, 2, 2, 2, 0]])
    rows, segs = p.finish()
    np.testing.assert_array_equal(rows, [[CLS, c, d, e, SEP, PAD, PAD, PAD]])
    np.testing.assert_array_equal(segs, [[1, 1, 1, 1, 1, 0, 0, 0]])
    # none: one piece per row
    p = DocumentPacker(8, CLS, SEP, PAD, one_per_row=True)
    rows, segs = p.add(np.array(ids("a b c d e f")), np.array([2, 3, 1]))
    assert rows.shape == (3, 8) and (segs.max(1) == 1).all() and p.padding == 3 * 8 - 12


def _short_docs(path, n_docs, seed=0):
    """Short documents (2 to 20 words): the case where padding each one wastes most of a row."""
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(VOCAB[5:31], int(rng.integers(2, 21)))) for _ in range(n_docs)]
    path.write_text("\n\n".join(docs) + "\n")
    return docs


@pytest.fixture(scope="module")
def short(tmp_path_factory, vocab):
    root = tmp_path_factory.mktemp("short")
    docs = _short_docs(root / "c.txt", 600)
    metas = {mode: prepare([str(root / "c.txt")], vocab, str(root / mode), max_length=32, validation_fraction=0.1,
                           progress=False, packing=mode) for mode in ("stream", "documents", "none")}
    return root, docs, metas


def _load(folder, split="train", name=""):
    meta = metadata(folder)
    shards = meta["splits"][split]["shards"]
    rows = np.concatenate([np.load(folder / s["file"]) for s in shards])
    if not name:
        return rows
    return rows, np.concatenate([np.load(folder / s["file"].replace(".npy", f"-{name}.npy")) for s in shards])


def test_documents_are_whole_and_padding_falls(short):
    root, docs, metas = short
    train = [d.split() for i, d in enumerate(docs) if not _is_val(i)]
    rows, segs = _load(root / "documents", name="segments")
    assert segs.dtype == np.uint8 and rows.shape == segs.shape
    pieces = []
    for r, s in zip(rows, segs):
        assert ((s == 0) == (r == PAD)).all()  # segment 0 is exactly the padding
        for k in range(1, s.max() + 1):
            where = np.flatnonzero(s == k)
            assert (np.diff(where) == 1).all()  # a document is one run
            piece = r[where]
            assert piece[0] == CLS and piece[-1] == SEP and not np.isin(piece[1:-1], [CLS, SEP, PAD]).any()
            pieces.append([VOCAB[t] for t in piece[1:-1]])
    # every document whole (none longer than a row here), each once, in a row with others
    assert sorted(map(tuple, pieces)) == sorted(map(tuple, train))
    meta = metas["documents"]
    assert meta["packing"] == "documents" and "packing" not in metas["stream"]
    n_tokens = sum(map(len, train)) + 2 * len(train)
    pad = {m: metas[m]["splits"]["train"]["padding_tokens"] for m in metas}
    rows_of = {m: metas[m]["splits"]["train"]["examples"] for m in metas}
    assert pad["documents"] == rows_of["documents"] * 32 - n_tokens == int((rows == PAD).sum())
    frac = {m: pad[m] / (rows_of[m] * 32) for m in metas}
    # the figures of this made corpus (540 train documents of 2 to 20 words, rows of 32)
    assert rows_of["none"] == len(train) == 540
    # padded share of the rows: 58.2% one document per row, 4.4% packed, 0.3% in one stream
    assert frac == pytest.approx({"none": 0.5822, "documents": 0.0441, "stream": 0.0034}, abs=1e-4), frac
    assert frac["documents"] < frac["none"] / 10
    none_rows, none_segs = _load(root / "none", name="segments")
    assert (none_segs.max(1) == 1).all() and ((none_segs == 0) == (none_rows == PAD)).all()


def _is_val(i, fraction=0.1):
    return np.floor((i + 1) * fraction + 0.5) > np.floor(i * fraction + 0.5)


def test_long_documents_are_split_into_row_sized_pieces(tmp_path, vocab):
    (tmp_path / "c.txt").write_text(" ".join("abcdefghijklmnopqrstuvwxyz") + "\n\na b\n")
    prepare([str(tmp_path / "c.txt")], vocab, str(tmp_path / "out"), max_length=12, validation_fraction=0.0,
            progress=False, packing="documents")
    rows, segs = _load(tmp_path / "out", name="segments")
    text = [[VOCAB[t] for t in r[s > 0] if t not in (CLS, SEP)] for r, s in zip(rows, segs)]
    assert text[0] == list("abcdefghij") and text[1] == list("klmnopqrst")
    assert text == [list("abcdefghij"), list("klmnopqrst"), list("uvwxyzab")]
    assert segs[2].tolist() == [1] * 8 + [2] * 4


def test_loader_carries_segment_ids_masks_no_padding_and_resumes(short):
    root = short[0]
    full = MLMLoader(root / "documents", 8, 32, seed=3)
    batches = [next(full) for _ in range(5)]
    for batch in batches:
        seg = batch["segment_ids"]
        assert seg.dtype == np.int32 and seg.shape == (8, 32)
        assert ((seg > 0) == (batch["attention_mask"] > 0)).all()
        b, m = np.nonzero(batch["masked_weights"])
        assert (seg[b, batch["masked_positions"][b, m]] > 0).all()  # masking never picks padding
    resumed = MLMLoader(root / "documents", 4, 32, seed=3, state=full.state(step=2))  # another batch size
    for want in batches[2:]:
        got = [next(resumed) for _ in range(2)]
        for key in want:
            np.testing.assert_array_equal(np.concatenate([g[key] for g in got]), want[key], err_msg=key)
    hosts = [MLMLoader(root / "documents", 4, 32, seed=3, process_index=p, process_count=2) for p in range(2)]
    np.testing.assert_array_equal(np.concatenate([h.batch_at(1)["segment_ids"] for h in hosts]),
                                  batches[1]["segment_ids"])
    assert "segment_ids" not in next(MLMLoader(root / "stream", 8, 32, seed=3))  # old data: as before


def test_data_of_another_packing_is_refused_naming_it(short):
    root = short[0]
    assert check_compatible(root / "documents", packing="documents")["packing"] == "documents"
    check_compatible(root / "stream", packing="stream")  # no record: stream
    with pytest.raises(DataCompatibilityError, match="prepared with packing 'stream'.*data.packing 'documents'"):
        check_compatible(root / "stream", packing="documents")
    with pytest.raises(DataCompatibilityError, match="packing 'none'"):
        check_compatible(root / "none", packing="documents")


def test_bad_packing_is_refused(tmp_path, vocab):
    (tmp_path / "c.txt").write_text("a b c\n")
    with pytest.raises(PrepareError, match="packing must be one of"):
        prepare([str(tmp_path / "c.txt")], vocab, str(tmp_path / "o"), packing="tight", progress=False)
    with pytest.raises(PrepareError, match="nsp"):
        prepare([str(tmp_path / "c.txt")], vocab, str(tmp_path / "o"), format="nsp", packing="documents",
                progress=False)


def test_cli_prepare_documents(short, vocab, tmp_path, capsys):
    from jaxbert.cli.main import main as cli_main
    root = short[0]
    code = cli_main(["data", "prepare", "--input", str(root / "c.txt"), "--tokenizer", vocab, "--output",
                     str(tmp_path / "out"), "--max-length", "32", "--validation-fraction", "0.1",
                     "--packing", "documents", "--quiet"])
    assert code == 0 and "packing documents" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "metadata.json").read_text())["packing"] == "documents"
    for f in ("train-00000.npy", "train-00000-segments.npy"):
        assert (tmp_path / "out" / f).read_bytes() == (root / "documents" / f).read_bytes()


def test_documents_packing_is_deterministic_for_any_worker_count(short, vocab, tmp_path, monkeypatch):
    from jaxbert.data import prepare as prepare_mod
    root = short[0]
    monkeypatch.setattr(prepare_mod, "CHUNK_CHARS", 1500)  # many chunks: open rows carry across them
    outs = []
    for name, workers in (("one", 1), ("two", 2)):
        prepare([str(root / "c.txt")], vocab, str(tmp_path / name), max_length=32, validation_fraction=0.1,
                num_workers=workers, progress=False, packing="documents")
        outs.append({f.name: f.read_bytes() for f in sorted((tmp_path / name).iterdir())})
    assert outs[0] == outs[1] and "train-00000-segments.npy" in outs[0]
    # chunking does not change the rows either: the packer's open rows carry over
    for f in ("train-00000.npy", "train-00000-segments.npy"):
        assert outs[0][f] == (root / "documents" / f).read_bytes()
