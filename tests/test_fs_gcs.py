"""jaxbert.fs and the readers on gs:// (a GCS emulator on 127.0.0.1): publishing, the
completeness marker, range reads of prepared shards, checkpoints, and bad URLs."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest


from jaxbert import fs
from jaxbert.errors import InputError


def _tree(gfs, url: str) -> dict:
    """{relative name: bytes} under url, read with gcsfs alone."""
    root = url[len("gs://"):]
    return {p[len(root) + 1:]: gfs.cat_file(p) for p in gfs.find(root)}


def test_publish_dir_on_a_bucket_replaces_only_when_complete(gcs):
    dst = gcs.url("pub")
    with fs.publish_dir(dst, "export") as tmp:
        (tmp / "a.txt").write_text("one")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.bin").write_bytes(b"\x00\x01")
    gfs = gcs.fs()
    assert _tree(gfs, dst) == {"a.txt": b"one", "sub/b.bin": b"\x00\x01",
                               fs.MARKER: json.dumps({"kind": "export", "files": ["a.txt", "sub"]}).encode() + b"\n"}
    with pytest.raises(InputError, match="--overwrite"):
        with fs.publish_dir(dst, "export"):
            pass
    with pytest.raises(RuntimeError):  # a failed write leaves the complete output as it was
        with fs.publish_dir(dst, "export", overwrite=True) as tmp:
            (tmp / "a.txt").write_text("half")
            raise RuntimeError("disk full")
    assert _tree(gcs.fs(), dst)["a.txt"] == b"one"
    gfs.pipe(dst[5:] + "/NOTES.md", b"mine")  # added beside jaxbert's files: kept, and named
    with pytest.raises(InputError, match="NOTES.md"):
        with fs.publish_dir(dst, "export", overwrite=True):
            pass
    assert _tree(gcs.fs(), dst)["NOTES.md"] == b"mine"
    gfs.rm(dst[5:] + "/NOTES.md")
    with fs.publish_dir(dst, "export", overwrite=True) as tmp:
        (tmp / "c.txt").write_text("two")
    after = _tree(gcs.fs(), dst)
    assert sorted(after) == [fs.MARKER, "c.txt"]  # the old files are gone, not mixed in
    parent = dst.rsplit("/", 1)[0][len("gs://"):]
    assert not [p for p in gcs.fs().ls(parent) if ".tmp-" in p]  # no staging prefix left behind


def test_an_unfinished_publish_is_refused_by_readers_and_may_be_redone(gcs):
    dst = gcs.url("half")
    gfs = gcs.fs()
    gfs.pipe(dst[5:] + "/metadata.json", b"{}")
    gfs.pipe(dst[5:] + "/" + fs.MARKER, json.dumps({"kind": "prepared", "complete": False}).encode())
    with pytest.raises(InputError, match="unfinished"):
        fs.require_complete(dst)
    from jaxbert.data.loader import metadata
    with pytest.raises(InputError, match="unfinished"):
        metadata(dst)
    with fs.publish_dir(dst, "prepared") as tmp:  # no --overwrite needed to finish it
        (tmp / "metadata.json").write_text('{"x": 1}')
    assert fs.is_complete(dst)
    assert gcs.fs().cat_file(dst[5:] + "/metadata.json") == b'{"x": 1}'


def test_remote_rows_read_only_the_rows_asked_for(gcs, monkeypatch):
    from jaxbert.data import remote as remote_mod
    from jaxbert.data.remote import RemoteRows
    rows = np.random.default_rng(0).integers(0, 30000, (1000, 16)).astype(np.uint16)
    buf = io.BytesIO()
    np.save(buf, rows)
    url = gcs.url("rows") + "/train-00000.npy"
    gcs.fs().pipe(url[5:], buf.getvalue())
    remote = RemoteRows(url)
    assert remote.shape == (1000, 16) and remote.dtype == np.uint16 and len(remote) == 1000
    fetched = []
    real = remote._fs.cat_ranges
    monkeypatch.setattr(remote._fs, "cat_ranges", lambda paths, starts, ends: (
        fetched.extend(e - s for s, e in zip(starts, ends)), real(paths, starts, ends))[1])
    index = np.array([999, 3, 4, 5, 500, 3, 0])
    monkeypatch.setattr(remote_mod, "COALESCE_BYTES", 32)  # 32-byte rows: only adjacent rows merge
    np.testing.assert_array_equal(remote[index], rows[index])
    assert sorted(fetched) == [32, 32, 32, 96]  # rows 0, 3-5 (one request), 500, 999; row 3 once
    fetched.clear()
    monkeypatch.setattr(remote_mod, "COALESCE_BYTES", 4 * 32)  # gaps of up to 4 rows are read through
    np.testing.assert_array_equal(remote[index], rows[index])
    assert sorted(fetched) == [32, 32, 6 * 32]  # rows 0-5, 500, 999
    np.testing.assert_array_equal(remote[10:13], rows[10:13])


def test_checkpoints_save_and_resume_on_a_bucket(gcs):
    import jax.numpy as jnp
    from jaxbert.workdir import read_params as restore_params
    from jaxbert.workdir import Checkpoints
    workdir = gcs.url("ckpt")
    ck = Checkpoints(workdir, every_steps=1, keep=2, log=lambda m: None)
    tree = {"step": jnp.int32(3), "params": {"w": jnp.arange(6.0).reshape(2, 3)}}
    ck.save(3, tree, {"step": 3, "loader": [{"pos": 7}], "recipe": {}})
    ck.close()
    again = Checkpoints(workdir, every_steps=1, keep=2, log=lambda m: None)
    assert again.steps() == [3]
    import jax
    step, restored, meta = again.restore_latest(jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree))
    again.close()
    assert step == 3 and meta["loader"] == [{"pos": 7}]
    np.testing.assert_array_equal(np.asarray(restored["params"]["w"]), np.arange(6.0).reshape(2, 3))
    params, _ = restore_params(workdir)
    np.testing.assert_array_equal(params["w"], np.arange(6.0).reshape(2, 3))
    assert {p.rsplit("/", 1)[-1] for p in gcs.fs().ls(workdir[5:] + "/checkpoints/3")} >= {"state", "meta"}


@pytest.mark.parametrize("url, named", [("gs://no-such-bucket-jb/run", "gs://no-such-bucket-jb"),
                                        ("ftp2://host/run", "ftp2://")])
def test_a_bad_url_is_one_line_naming_it_and_exit_2(gcs, tmp_path, url, named):
    r = subprocess.run([sys.executable, "-m", "jaxbert.cli.main", "export", url, str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_loader_batches_from_a_bucket_equal_the_local_ones(gcs, tmp_path):
    from jaxbert.data.loader import MLMLoader
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join("A for loop iterates over the items of a sequence, in order. " * (i % 5 + 1)
                                for i in range(200)))
    train_tokenizer([str(text)], 120, tmp_path / "tok")
    prepare([str(text)], str(tmp_path / "tok"), str(tmp_path / "data"), max_length=16, validation_fraction=0.1,
            rows_per_shard=64, progress=False, num_workers=1)  # several shards: reads cross them
    url = gcs.url("data")
    gcs.fs().put(str(tmp_path / "data") + "/", url[5:] + "/", recursive=True)
    here = MLMLoader(tmp_path / "data", 8, process_index=1, process_count=2, whole_word_mask=True)
    there = MLMLoader(url, 8, process_index=1, process_count=2, whole_word_mask=True)
    assert len(here.meta["splits"]["train"]["shards"]) > 2
    for step in (0, 1, 7, here.steps_per_epoch + 2):
        a, b = here.batch_at(step), there.batch_at(step)
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{k} at step {step}")
