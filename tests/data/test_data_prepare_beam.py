"""`prepare` on Apache Beam's DirectRunner writes the bytes the local path writes; bad runner
arguments are one line before any work."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from pydoc_data.topics import topics

from jaxbert.cli.main import main as cli_main
from jaxbert.data import beam as beam_mod
from jaxbert.data import encode
from jaxbert.data.corpus import CorpusError
from jaxbert.data.prepare import prepare
from jaxbert.finetune.demo import minilm_folder
from tests.helpers.cli import one_line

pytest.importorskip("apache_beam")


@pytest.fixture
def corpus(tmp_path):
    """Python's language reference over 4 jsonl files, a text file with bytes that are not UTF-8,
    and an empty file: real text in files whose documents the chunks cut across."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    names = sorted(topics)[:240]
    for f in range(4):
        with open(folder / f"part-{f}.jsonl", "w") as out:
            for name in names[f::4]:
                out.write(json.dumps({"text": topics[name]}) + "\n")
    (folder / "part-4.txt").write_bytes(b"\n\n".join(topics[n].encode() for n in names[:30]) + b"\n\nbad \xff\xfe byte\n")
    (folder / "part-5.txt").write_bytes(b"")
    return str(folder)


def _files(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir())}


@pytest.mark.parametrize("fmt, packing, mode", [("mlm", "documents", "multi_processing"),
                                                ("nsp", "stream", "multi_threading")])
def test_direct_runner_writes_the_bytes_of_the_local_path(corpus, tmp_path, monkeypatch, fmt, packing, mode):
    # Small chunks (the runner's workers never see this: chunks are planned here) so that a chunk
    # holds documents of two files and the workers get many.
    monkeypatch.setattr(encode, "CHUNK_CHARS", 40_000)
    staged = []
    mkdtemp = beam_mod.tempfile.mkdtemp
    monkeypatch.setattr(beam_mod.tempfile, "mkdtemp", lambda **kw: staged.append(mkdtemp(**kw)) or staged[-1])
    tokenizer = minilm_folder()
    args = dict(max_length=64, format=fmt, packing=packing, validation_fraction=0.05, seed=3, progress=False,
                rows_per_shard=300)
    local = prepare([corpus], tokenizer, str(tmp_path / "local"), num_workers=1, **args)
    beam = prepare([corpus], tokenizer, str(tmp_path / "beam"), runner="direct",
                   pipeline_options=f"--direct_num_workers=2 --direct_running_mode={mode}", **args)

    assert beam == local
    assert _files(tmp_path / "beam") == _files(tmp_path / "local")
    # what the comparison covered: several shards, rows from every file, the bad bytes counted
    assert len(local["splits"]["train"]["shards"]) >= 3
    assert local["counts"]["documents"] > 240  # the text file adds its blank-line separated documents
    assert [s["replaced"] for s in local["sources"]] == [0, 0, 0, 0, 2, 0]
    assert local["sources"][5]["skipped"] == "empty"
    lengths = [len(topics[n]) for n in sorted(topics)[:240]]
    assert len(encode.chunk_starts(np.asarray(lengths))) > 6  # more chunks than files: chunks span files
    staged = [s for s in staged if Path(s).name.startswith("jaxbert-prepare-")]
    assert len(staged) == 1 and not Path(staged[0]).exists()  # the staged chunks are removed


def test_chunk_starts_cut_where_chunks_cut():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, 3000)
    docs = [("x" * int(n), 1) for n in lengths]
    starts = [first for _, _, first, _ in encode.chunks(docs)]
    np.testing.assert_array_equal(encode.chunk_starts(lengths), starts)
    many_small = np.ones(encode.CHUNK_DOCS * 2, np.int64)  # closes by count, exactly at the end
    np.testing.assert_array_equal(encode.chunk_starts(many_small), [0, encode.CHUNK_DOCS])


def test_a_bad_file_read_by_a_worker_is_the_local_paths_error(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"text": "fine"}\n{oops\n')
    with pytest.raises(CorpusError, match=r"a.jsonl:2: not valid JSON"):
        prepare([str(folder)], minilm_folder(), str(tmp_path / "out"), runner="direct", progress=False,
                pipeline_options="--direct_num_workers=2 --direct_running_mode=multi_threading")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad"]


@pytest.mark.parametrize("extra, needle", [
    (["--runner", "dataflow", "--input", "CORPUS"], "needs --temp_location"),
    (["--runner", "dataflow", "--pipeline-options=--temp_location=gs://b/tmp"], "embedded corpus"),
    (["--runner", "direct", "--pipeline-options=--runner=DataflowRunner"], "give the runner with --runner"),
    (["--runner", "direct", "--pipeline-options=--project='unclosed"], "--pipeline-options"),
    # Beam would print its 128-line usage, or drop the unknown option with a warning
    (["--runner", "direct", "--pipeline-options=--direct_num_workers=abc"],
     "--pipeline-options: argument --direct_num_workers: invalid int value: 'abc'"),
    (["--runner", "dataflow", "--input", "CORPUS", "--pipeline-options=--temp_location=gs://b/tmp --no_such_option=3"],
     "knows no option --no_such_option=3"),
    (["--runner", "direct", "--pipeline-options=--temp_locaton=gs://b/tmp"], "knows no option --temp_locaton"),
    # the local runner is no Beam runner: options for it would be ignored
    (["--pipeline-options=--direct_num_workers=2"], "--runner local (this machine's processes, no Beam) takes none"),
])
def test_bad_runner_arguments_are_one_line_before_any_work(corpus, tmp_path, capsys, extra, needle):
    out = tmp_path / "out"
    extra = [corpus if a == "CORPUS" else a for a in extra]
    code = cli_main(["data", "prepare", "--tokenizer", minilm_folder(), "--output", str(out), "--quiet", *extra])
    assert code == 2
    one_line(capsys.readouterr(), "data", needle)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_staging_and_output_in_a_bucket(corpus, tmp_path, gcs):
    """The chunks staged under a gs:// --temp_location (where Dataflow's workers put them), the output
    published to a bucket: the same files as the local path writes to a local folder."""
    tokenizer = minilm_folder()
    args = dict(max_length=32, validation_fraction=0.05, progress=False, rows_per_shard=2000)
    prepare([corpus], tokenizer, str(tmp_path / "local"), num_workers=1, **args)
    url, temp = gcs.url("prepared"), gcs.url("tmp")
    prepare([corpus], tokenizer, url, runner="direct", **args,
            pipeline_options=f"--temp_location={temp} --direct_num_workers=2 --direct_running_mode=multi_threading")
    bucket = gcs.fs()
    fetched = tmp_path / "fetched"
    bucket.get(url[5:] + "/", str(fetched) + "/", recursive=True)
    local = {k: v for k, v in _files(tmp_path / "local").items() if not k.startswith(".")}
    assert {k: v for k, v in _files(fetched).items() if not k.startswith(".")} == local
    assert [p for p in bucket.find(temp[5:]) if "jaxbert-prepare-" in p] == []  # the staged chunks are removed
    assert len(local) >= 4


def test_quiet_keeps_beams_lines_off_the_terminal(tmp_path, capfd):
    """--quiet: nothing on stderr, where Beam's worker processes log their start (INFO, WARNING) and the
    Google Cloud client warning at import; the summary line on stdout stays."""
    folder = tmp_path / "small"
    folder.mkdir()
    for f in range(2):
        (folder / f"part-{f}.txt").write_text("\n\n".join(topics[n] for n in sorted(topics)[f * 5:f * 5 + 5]))
    capfd.readouterr()
    code = cli_main(["data", "prepare", "--input", str(folder), "--tokenizer", minilm_folder(), "--output",
                     str(tmp_path / "out"), "--max-length", "32", "--runner", "direct", "--quiet",
                     "--pipeline-options=--direct_num_workers=2 --direct_running_mode=multi_processing"])
    out, err = capfd.readouterr()
    assert code == 0
    assert err == ""
    assert out.startswith(f"{tmp_path / 'out'}: ") and " train and " in out and len(out.splitlines()) == 1, out
