"""data prepare / tokenizer train / train recipes: bounded documents, safe destinations, one-line errors."""

import json
import os
import tracemalloc

import pytest

from jaxbert.cli.main import main
from jaxbert.data import corpus as corpus_mod
from jaxbert.data.corpus import iter_documents

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["é"]


@pytest.fixture
def tok(tmp_path):
    path = tmp_path / "tok" / "vocab.txt"
    path.parent.mkdir()
    path.write_text("\n".join(VOCAB) + "\n")
    return str(path)


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert str(n) in err, err


def test_a_file_without_newlines_becomes_bounded_documents(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_mod, "MAX_DOCUMENT_CHARS", 1 << 16)
    text = ("ab é " * 400_000)  # 2 MB, no newline; 'é' is two bytes, so reads cut characters in half
    (tmp_path / "one.txt").write_text(text, encoding="utf-8")
    tracemalloc.start()
    docs = [d for d, _ in iter_documents([str(tmp_path / "one.txt")])]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "".join(docs) == text and "\ufffd" not in "".join(docs)
    # a text document closes at the read that takes it past the bound: at most two reads long
    assert max(map(len, docs)) <= 2 << 16 and len(docs) >= len(text) // (2 << 16)
    assert peak < 12 * (1 << 16) + len(text) * 2  # docs kept by the test; no whole-file string on top
    jl = tmp_path / "big.jsonl"
    jl.write_text(json.dumps({"text": "word " * 100_000}) + "\n")
    docs = [d for d, _ in iter_documents([str(jl)])]
    assert max(map(len, docs)) <= 1 << 16 and "".join(docs) == "word " * 100_000


def test_a_huge_line_is_read_in_bounded_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_mod, "MAX_DOCUMENT_CHARS", 1 << 16)
    (tmp_path / "one.txt").write_bytes(b"x " * (4 << 20))  # 8 MB in one line
    tracemalloc.start()
    longest = max(len(d) for d, _ in iter_documents([str(tmp_path / "one.txt")]))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert longest <= 1 << 16 and peak < 2 << 20  # was the whole 8 MB line, twice (bytes and str)


@pytest.mark.parametrize("case", ["empty", "no-text-field", "ml0", "ml1", "ml2", "ml100000"])
def test_prepare_bad_input_is_one_line_exit_2(tmp_path, tok, capsys, case):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "body.jsonl").write_text('{"body": "a b c"}\n')
    (tmp_path / "ok.txt").write_text("a b c d\n\ne f g\n")
    args, needle = {
        "empty": (["--input", str(tmp_path / "empty.txt")], "empty.txt"),
        "no-text-field": (["--input", str(tmp_path / "body.jsonl")], "body.jsonl:1: no field 'text'"),
        "ml0": (["--input", str(tmp_path / "ok.txt"), "--max-length", "0"], "max_length 0 is out of range"),
        "ml1": (["--input", str(tmp_path / "ok.txt"), "--max-length", "1"], "max_length 1 is out of range"),
        "ml2": (["--input", str(tmp_path / "ok.txt"), "--max-length", "2"], "max_length 2 is out of range"),
        "ml100000": (["--input", str(tmp_path / "ok.txt"), "--max-length", "100000"], "expected 3 to 65535"),
    }[case]
    assert main(["data", "prepare", *args, "--tokenizer", tok, "--output", str(tmp_path / "out"), "--quiet"]) == 2
    _one_line_error(capsys, needle)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("name,content,needle", [("empty.txt", "", "empty corpus: no documents in"),
                                                  ("body.jsonl", '{"body": "a"}\n', "no field 'text'")])
def test_tokenizer_train_bad_input_is_one_line_exit_2(tmp_path, capsys, name, content, needle):
    (tmp_path / name).write_text(content)
    assert main(["tokenizer", "train", "--input", str(tmp_path / name), "--vocab-size", "50",
                 "--output", str(tmp_path / "tok")]) == 2
    _one_line_error(capsys, needle, name)
    assert not (tmp_path / "tok").exists()


def test_prepare_never_deletes_a_folder_that_merely_holds_metadata_json(tmp_path, tok, capsys):
    (tmp_path / "ok.txt").write_text("a b c d\n\ne f g\n" * 20)
    out = tmp_path / "out"
    out.mkdir()
    files = {"metadata.json": b'{"mine": true}', "results.csv": b"1,2,3", "paper.pdf": os.urandom(300)}
    for name, data in files.items():
        (out / name).write_bytes(data)
    base = ["data", "prepare", "--input", str(tmp_path / "ok.txt"), "--tokenizer", tok, "--quiet", "--max-length", "8"]
    for extra in ([], ["--overwrite"]):
        assert main(base + ["--output", str(out)] + extra) == 2
        _one_line_error(capsys, out, "refusing")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    # its own output: refused without --overwrite, replaced with it; a sibling file survives
    (tmp_path / "keep.txt").write_text("sibling")
    assert main(base + ["--output", str(tmp_path / "ds")]) == 0
    assert main(base + ["--output", str(tmp_path / "ds")]) == 2
    _one_line_error(capsys, "--overwrite")
    assert main(base + ["--output", str(tmp_path / "ds"), "--overwrite", "--max-length", "6"]) == 0
    assert json.loads((tmp_path / "ds" / "metadata.json").read_text())["max_length"] == 6
    assert (tmp_path / "keep.txt").read_text() == "sibling"
    # the input's own folder is not an output
    assert main(base + ["--output", str(tmp_path)]) == 2
    _one_line_error(capsys, "overlaps the source")


def test_prepare_overwrite_replaces_only_what_it_wrote_and_keeps_workdirs_apart(tmp_path, tok, capsys):
    (tmp_path / "ok.txt").write_text("a b c d\n\ne f g\n" * 20)
    base = ["data", "prepare", "--input", str(tmp_path / "ok.txt"), "--tokenizer", tok, "--quiet", "--max-length", "8"]
    ds = tmp_path / "ds"
    assert main(base + ["--output", str(ds)]) == 0
    marker = json.loads((ds / ".jaxbert-output").read_text())
    assert marker["kind"] == "dataset" and "metadata.json" in marker["files"] and "tokenizer.json" in marker["files"]
    # a training workdir inside the prepared data is refused before anything is written
    assert main(["train", "--workdir", str(ds / "run"), "--set", "train.steps=1"]) == 2
    _one_line_error(capsys, ds / "run", ds, "dataset")
    assert not (ds / "run").exists()
    # one made there anyway (and a user's notes): --overwrite names them and deletes nothing
    (ds / "run" / "checkpoints" / "4").mkdir(parents=True)
    (ds / "run" / "recipe.yaml").write_text("mine")
    (ds / "NOTES.md").write_text("my notes")
    assert main(base + ["--output", str(ds), "--overwrite"]) == 2
    _one_line_error(capsys, ds, "holds the training workdir", ds / "run")
    (ds / "run").rename(tmp_path / "run")
    assert main(base + ["--output", str(ds), "--overwrite"]) == 2
    _one_line_error(capsys, ds, "NOTES.md", "did not write")
    assert (ds / "NOTES.md").read_text() == "my notes"
    (ds / "NOTES.md").unlink()
    assert main(base + ["--output", str(ds), "--overwrite", "--max-length", "6"]) == 0
    # a data output inside a workdir, or holding one, is refused naming both
    for out in (tmp_path / "run" / "more-data", tmp_path):
        assert main(base + ["--output", str(out)]) == 2
        _one_line_error(capsys, out, tmp_path / "run")
    assert not (tmp_path / "run" / "more-data").exists()
    assert (tmp_path / "run" / "recipe.yaml").read_text() == "mine"


@pytest.mark.parametrize("recipe,needle", [
    ("- a\n- b\n", "a recipe is a mapping of sections, got a YAML list"),
    ("optim:\n  learning_rate: .nan\n", "optim.learning_rate: expected a finite number"),
    ("model:\n  config:\n    tie_word_embeddings: 'false'\n", "tie_word_embeddings must be true or false"),
])
def test_bad_recipes_are_one_line_exit_2(tmp_path, capsys, recipe, needle):
    (tmp_path / "r.yaml").write_text(recipe)
    assert main(["train", "--config", str(tmp_path / "r.yaml"), "--workdir", str(tmp_path / "wd")]) == 2
    _one_line_error(capsys, needle)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_workdir_is_one_line_exit_2(tmp_path, capsys):
    wd = tmp_path / "ro"
    wd.mkdir()
    wd.chmod(0o555)
    assert main(["train", "--workdir", str(wd), "--set", "train.steps=1"]) == 2
    _one_line_error(capsys, wd, "Permission denied")


def test_a_workdir_that_cannot_be_a_folder_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    wd = tmp_path / "file" / "wd"
    assert main(["train", "--workdir", str(wd), "--set", "train.steps=1"]) == 2
    _one_line_error(capsys, tmp_path / "file", "Not a directory")
