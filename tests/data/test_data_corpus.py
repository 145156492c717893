"""Corpus readers: text, jsonl, parquet, globs, folders, datasets.save_to_disk, the embedded corpus."""

import itertools
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxbert.data import corpus as corpus_mod
from jaxbert.data.corpus import Corpus, CorpusError, resolve_inputs


def docs(inputs, **kw):
    return [d for d, _ in Corpus(inputs, **kw)]


def test_text_documents_are_blank_line_separated(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\r\n\r\n  \t\nthree\n\n\n")
    assert docs([str(tmp_path / "a.txt")]) == ["one\ntwo", "three"]


def test_overlong_text_document_is_cut_at_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_mod, "MAX_DOCUMENT_CHARS", 10)
    (tmp_path / "a.txt").write_text("aaaaaa\nbbbbbb\ncc\n")
    assert docs([str(tmp_path / "a.txt")]) == ["aaaaaa\nbbbbbb", "cc"]


def test_jsonl(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "first"}\n\n{"text": null}\n{"text": "second", "id": 2}\n')
    assert docs([str(tmp_path / "a.jsonl")]) == ["first", "second"]
    (tmp_path / "b.jsonl").write_text('{"text": "ok"}\n{"body": "x"}\n')
    with pytest.raises(CorpusError, match=r"b.jsonl:2: no field 'text' \(found \['body'\]\)"):
        docs([str(tmp_path / "b.jsonl")])
    (tmp_path / "c.jsonl").write_text('{"text": "ok"}\n{oops\n')
    with pytest.raises(CorpusError, match="c.jsonl:2: not valid JSON"):
        docs([str(tmp_path / "c.jsonl")])
    (tmp_path / "d.jsonl").write_text('{"text": 3}\n')
    with pytest.raises(CorpusError, match="d.jsonl:1: field 'text' is int"):
        docs([str(tmp_path / "d.jsonl")])


def test_parquet_and_binary_columns(tmp_path):
    pq.write_table(pa.table({"content": ["alpha", None, "beta"], "n": [1, 2, 3]}), tmp_path / "a.parquet")
    assert docs([str(tmp_path / "a.parquet")], text_field="content") == ["alpha", "beta"]
    with pytest.raises(CorpusError, match=r"no column 'text' \(columns: \['content', 'n'\]\)"):
        docs([str(tmp_path / "a.parquet")])
    pq.write_table(pa.table({"text": pa.array([b"ok \xff", b"fine"], pa.binary())}), tmp_path / "b.parquet")
    c = Corpus([str(tmp_path / "b.parquet")])
    assert list(d for d, _ in c) == ["ok \ufffd", "fine"]
    assert c.stats[0].replaced == 1


def _save_to_disk(folder, texts):
    """The layout datasets.Dataset.save_to_disk writes: Arrow IPC stream + state.json."""
    folder.mkdir(parents=True)
    table = pa.table({"text": texts, "id": list(range(len(texts)))})
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (folder / "dataset_info.json").write_text("{}")


def test_datasets_save_to_disk(tmp_path):
    _save_to_disk(tmp_path / "ds", ["one", "", "two"])
    assert docs([str(tmp_path / "ds")]) == ["one", "two"]
    _save_to_disk(tmp_path / "dd" / "train", ["train doc"])
    _save_to_disk(tmp_path / "dd" / "test", ["test doc"])
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    assert docs([str(tmp_path / "dd")]) == ["train doc"]


def test_globs_and_folders(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_text("b")
    (tmp_path / "d" / "sub" / "a.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "d" / ".hidden.txt").write_text("hidden")
    (tmp_path / "d" / "image.png").write_bytes(b"\x89PNG")
    assert [k for k, _ in resolve_inputs([str(tmp_path / "d")])] == ["text", "jsonl"]
    assert docs([str(tmp_path / "d")]) == ["b", "a"]
    assert docs([str(tmp_path / "d" / "**" / "*.jsonl"), str(tmp_path / "d" / "b.txt")]) == ["a", "b"]
    with pytest.raises(CorpusError, match="no files match"):
        resolve_inputs([str(tmp_path / "*.nothing")])
    (tmp_path / "e").mkdir()
    with pytest.raises(CorpusError, match="holds no .txt"):
        resolve_inputs([str(tmp_path / "e")])


def test_folders_behind_links_are_read_once_and_loops_end(tmp_path):
    main, sibling = tmp_path / "main", tmp_path / "sibling"
    (main / "own").mkdir(parents=True)
    sibling.mkdir()
    (main / "own" / "a.txt").write_text("one\n\ntwo\n")
    (sibling / "b.txt").write_text("three\n\nfour\n")
    (main / "sib").symlink_to(sibling, target_is_directory=True)  # a link to a sibling folder: followed
    (main / "own" / "up").symlink_to(main, target_is_directory=True)  # a loop: main/own/up/own/up/...
    (main / "own2").symlink_to(main / "own", target_is_directory=True)  # a folder reached twice: read once
    found = [p for _, p in resolve_inputs([str(main)])]
    assert [p.relative_to(main).as_posix() for p in found] == ["own/a.txt", "sib/b.txt"]
    assert [d for d, _ in Corpus([str(main)])] == ["one", "two", "three", "four"]


def test_embedded_default_corpus():
    from pydoc_data.topics import topics

    c = Corpus(None)
    first = list(itertools.islice(iter(c), len(topics) + 3))
    assert first[0][0].startswith(topics[sorted(topics)[0]].strip()[:20])
    raw = "".join(topics.values())
    cleaned = "".join(d for d, _ in first[: len(topics)])
    assert re.search(r"^\*{5,}$", raw, re.M) and not re.search(r"^\*{5,}$", cleaned, re.M)  # underlines dropped
    assert [s.path for s in c.stats] == ["pydoc_data.topics", "stdlib docstrings"]
    assert all(len(d) > 0 for d, _ in first[len(topics):])
    assert c.total() > 1_000_000
