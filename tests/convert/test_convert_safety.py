"""Untrusted, broken and mismatched checkpoints, and conversion destinations: refused with one line naming
the file, nothing lost, nothing loaded wrong, and no code runs.

Each case goes through `jaxbert.cli.main.main` (exit code and one named line on stderr)
or the library call that the verbs share.
"""

import json
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import torch

import jaxbert
from jaxbert.cli.main import main
from jaxbert.convert import ConversionError
from jaxbert.convert.safetensors_io import SafetensorsError, SafetensorsReader
from tests.helpers.hf_models import tiny_hf_model

class _Payload:
    """Unpickling this would create the file at ``target``."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.target),))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    tiny_hf_model("BertModel", seed=31).save_pretrained(d)
    return d


@pytest.mark.parametrize("zipped", [True, False])
def test_pickle_payload_is_refused_and_never_runs(hf_dir, tmp_path, zipped):
    target = tmp_path / "pwned"
    bad = tmp_path / "pytorch_model.bin"
    state = {"embeddings.word_embeddings.weight": torch.zeros(99, 32), "x": _Payload(str(target))}
    if zipped:
        torch.save(state, bad)  # the current zip format
    else:
        with open(bad, "wb") as f:  # the legacy raw-pickle format
            pickle.dump(state, f)
    assert not target.exists()
    with pytest.raises(ConversionError, match=rf"{bad}: refused to unpickle it"):
        jaxbert.from_pretrained(bad, config=hf_dir / "config.json")
    assert not target.exists()
    # Control: an unguarded load does run the payload.
    if zipped:
        torch.load(bad, weights_only=False)
    else:
        with open(bad, "rb") as f:
            pickle.load(f)
    assert target.exists()


def test_truncated_safetensors_names_the_file(hf_dir, tmp_path):
    data = (hf_dir / "model.safetensors").read_bytes()
    cut = tmp_path / "model.safetensors"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(ConversionError, match=rf"{cut}: is truncated: its header needs {len(data)} bytes"):
        jaxbert.from_pretrained(cut, config=hf_dir / "config.json")
    cut.write_bytes(data[:5])
    with pytest.raises(ConversionError, match=rf"{cut}: is 5 bytes long"):
        jaxbert.from_pretrained(cut, config=hf_dir / "config.json")
    cut.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(ConversionError, match=rf"{cut}: header is not valid JSON"):
        jaxbert.from_pretrained(cut, config=hf_dir / "config.json")


def test_bin_that_is_not_a_zip_names_the_file(hf_dir, tmp_path):
    junk = tmp_path / "pytorch_model.bin"
    junk.write_bytes(b"this is not a torch checkpoint" * 10)
    with pytest.raises(ConversionError, match=rf"{junk}: not a readable PyTorch checkpoint"):
        jaxbert.from_pretrained(junk, config=hf_dir / "config.json")
    good = tmp_path / "good.bin"
    torch.save({"a": torch.ones(1000)}, good)
    junk.write_bytes(good.read_bytes()[:400])  # a zip cut short
    with pytest.raises(ConversionError, match=rf"{junk}: not a readable PyTorch checkpoint"):
        jaxbert.from_pretrained(junk, config=hf_dir / "config.json")


def test_index_naming_a_missing_shard(hf_dir, tmp_path):
    model = tiny_hf_model("BertModel", seed=31)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    index = tmp_path / "model.safetensors.index.json"
    shard = sorted(set(json.loads(index.read_text())["weight_map"].values()))[1]
    (tmp_path / shard).unlink()
    with pytest.raises(ConversionError, match=rf"{index} names the shard {shard}, which does not exist"):
        jaxbert.from_pretrained(tmp_path)


def test_failed_write_leaves_the_old_file(hf_dir, tmp_path):
    module, params = jaxbert.from_pretrained(hf_dir)
    jaxbert.save_pretrained(tmp_path, module, params)
    before = (tmp_path / "model.safetensors").read_bytes()
    broken = dict(params, pooler={"dense": {"kernel": np.zeros((3, 3)), "bias": np.zeros(3)}})
    with pytest.raises(ConversionError, match=r"pooler/dense/kernel: params \[3, 3\], BertModel expects \[32, 32\]"):
        jaxbert.save_pretrained(tmp_path, module, broken)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".jaxbert-output", "config.json", "model.safetensors"]


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf") / "hf"
    tiny_hf_model("BertForMaskedLM", seed=5).save_pretrained(d)
    return d


def _snapshot(folder):
    """{relative path: bytes} of every file under folder."""
    return {os.path.relpath(os.path.join(r, f), folder): open(os.path.join(r, f), "rb").read()
            for r, _, files in os.walk(folder) for f in files}


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert str(n) in err, err
    return err


def _raw_safetensors(path, header: bytes, data: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def _word(params):
    return np.asarray(params["bert"]["embeddings"]["word_embeddings"]["embedding"])


# ---- destinations -----------------------------------------------------------

def test_convert_replaces_only_its_own_output_and_keeps_user_files(mlm_dir, tmp_path, capsys):
    other = tmp_path / "other"
    tiny_hf_model("BertForMaskedLM", seed=6).save_pretrained(other)
    (tmp_path / "notes.txt").write_text("a sibling of the destination")
    dst = tmp_path / "dst"
    assert main(["convert", str(other), str(dst), "--to", "jaxbert"]) == 0
    # --to hf into the jaxbert directory: refused without --overwrite, then replaced whole.
    assert main(["convert", str(mlm_dir), str(dst), "--to", "hf"]) == 2
    _one_line_error(capsys, dst, "--overwrite")
    assert main(["convert", str(mlm_dir), str(dst), "--to", "hf", "--overwrite"]) == 0
    assert sorted(os.listdir(dst)) == [".jaxbert-output", "config.json", "model.safetensors"]
    np.testing.assert_array_equal(_word(jaxbert.from_pretrained(dst)[1]), _word(jaxbert.from_pretrained(mlm_dir)[1]))
    # and back: no model.safetensors is left for transformers to find
    assert main(["convert", str(other), str(dst), "--to", "jaxbert", "--overwrite"]) == 0
    assert "model.safetensors" not in os.listdir(dst) and "jaxbert.json" in os.listdir(dst)
    assert (tmp_path / "notes.txt").read_text() == "a sibling of the destination"


def test_convert_overwrite_keeps_what_a_user_added_to_its_output(mlm_dir, tmp_path, capsys):
    dst = tmp_path / "dst"
    args = ["convert", str(mlm_dir), str(dst), "--to", "hf"]
    assert main(args) == 0
    (dst / "NOTES.md").write_text("what I tried")
    (dst / "runs" / "a").mkdir(parents=True)
    (dst / "runs" / "a" / "log.txt").write_text("mine")
    before = _snapshot(dst)
    assert main(args + ["--overwrite"]) == 2
    _one_line_error(capsys, dst, "NOTES.md", "runs", "did not write")
    assert _snapshot(dst) == before
    (dst / "NOTES.md").unlink()
    (dst / "runs" / "a" / "log.txt").unlink()
    (dst / "runs" / "a").rmdir()
    (dst / "runs").rmdir()
    assert main(args + ["--overwrite"]) == 0


@pytest.mark.parametrize("inside", [False, True])
def test_convert_refuses_a_folder_of_user_files(mlm_dir, tmp_path, capsys, inside):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "thesis.tex").write_text("years of work")
    (docs / "sub" / "data.bin").write_bytes(os.urandom(100))
    before = _snapshot(docs)
    dst = docs / "sub" if inside else docs
    args = ["convert", str(mlm_dir), str(dst), "--to", "hf"]
    for extra in ([], ["--overwrite"]):
        assert main(args + extra) == 2
        _one_line_error(capsys, dst, "refusing")
    assert _snapshot(docs) == before and sorted(os.listdir(tmp_path)) == ["docs"]


def test_the_source_is_never_the_destination(mlm_dir, tmp_path, capsys):
    src = tmp_path / "src"
    assert main(["convert", str(mlm_dir), str(src), "--to", "hf"]) == 0
    before = _snapshot(src)
    for dst in (src, src / "inner", tmp_path):
        assert main(["convert", str(src), str(dst), "--to", "hf", "--overwrite"]) == 2
        _one_line_error(capsys, "overlaps the source")
    assert main(["convert", str(src / "model.safetensors"), str(src), "--to", "jaxbert", "--overwrite"]) == 2
    _one_line_error(capsys, "overlaps the source")
    assert _snapshot(src) == before


def test_save_pretrained_replaces_its_own_output_only(mlm_dir, tmp_path):
    module, params = jaxbert.from_pretrained(mlm_dir)
    jaxbert.save_pretrained(tmp_path / "a", module, params, format="jaxbert")
    jaxbert.save_pretrained(tmp_path / "a", module, params, format="hf")  # its own kind: replaced
    assert sorted(os.listdir(tmp_path / "a")) == [".jaxbert-output", "config.json", "model.safetensors"]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "README.md").write_text("mine")
    with pytest.raises(jaxbert.errors.InputError, match="README.md"):
        jaxbert.save_pretrained(tmp_path / "b", module, params)
    assert os.listdir(tmp_path / "b") == ["README.md"]


_FSIZE_CHILD = """
import resource, sys
from jaxbert.cli.main import main
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.exit(main(sys.argv[2:]))
"""


def test_sharded_write_that_fails_halfway_leaves_the_destination_as_it_was(mlm_dir, tmp_path):
    dst = tmp_path / "dst"
    other = tmp_path / "other"
    tiny_hf_model("BertForMaskedLM", seed=9).save_pretrained(other)
    assert main(["convert", str(other), str(dst), "--to", "hf", "--max-shard-size", "20KB"]) == 0
    sizes = sorted(os.path.getsize(dst / f) for f in os.listdir(dst) if f.endswith(".safetensors"))
    assert len(sizes) > 2
    before = _snapshot(dst)
    limit = sizes[-1] - 1  # the largest shard cannot be written; smaller ones can
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", _FSIZE_CHILD, str(limit), "convert", str(mlm_dir), str(dst),
                          "--to", "hf", "--max-shard-size", "20KB", "--overwrite"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and ".safetensors: cannot write it: File too large" in out.stderr
    assert _snapshot(dst) == before  # old shards only, byte for byte
    assert sorted(os.listdir(tmp_path)) == ["dst", "other"]  # no temporary directory left behind
    np.testing.assert_array_equal(_word(jaxbert.from_pretrained(dst)[1]), _word(jaxbert.from_pretrained(other)[1]))


# ---- checkpoints of something else --------------------------------------------

def _copy_hf(mlm_dir, dst, **config_changes):
    dst.mkdir()
    (dst / "model.safetensors").write_bytes((mlm_dir / "model.safetensors").read_bytes())
    cfg = json.loads((mlm_dir / "config.json").read_text())
    for k, v in config_changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_unsupported_model_type_is_refused_by_name(mlm_dir, tmp_path, capsys):
    src = _copy_hf(mlm_dir, tmp_path / "alb", model_type="albert", architectures=None)
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "jaxbert"]) == 2
    _one_line_error(capsys, "model_type 'albert' is not supported", "'bert'", "'roberta'")
    # A BERT checkpoint whose config says roberta: the roberta.* tensors it must hold are not there.
    src = _copy_hf(mlm_dir, tmp_path / "rob", model_type="roberta", architectures=None)
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "jaxbert"]) == 2
    _one_line_error(capsys, "only 0 of the", "not a checkpoint of this model")
    src = _copy_hf(mlm_dir, tmp_path / "gpt2", model_type="gpt2")
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "hf", "--model-class", "BertModel"]) == 2
    _one_line_error(capsys, "model_type 'gpt2'")
    assert not (tmp_path / "out").exists()


def test_loads_matching_none_or_too_few_tensors_are_refused(mlm_dir, tmp_path, capsys):
    gpt2 = tmp_path / "gpt2.safetensors"
    header = {"h.0.attn.c_attn.weight": {"dtype": "F32", "shape": [32, 96], "data_offsets": [0, 32 * 96 * 4]},
              "wte.weight": {"dtype": "F32", "shape": [99, 32], "data_offsets": [32 * 96 * 4, 32 * 96 * 4 + 99 * 128]}}
    _raw_safetensors(gpt2, json.dumps(header).encode(), bytes(32 * 96 * 4 + 99 * 128))
    cfg = str(mlm_dir / "config.json")
    assert main(["convert", str(gpt2), str(tmp_path / "out"), "--to", "hf", "--config", cfg,
                 "--model-class", "BertModel"]) == 2
    _one_line_error(capsys, gpt2, "only 0 of the")
    empty = tmp_path / "empty.safetensors"
    _raw_safetensors(empty, b"{}")
    assert main(["convert", str(empty), str(tmp_path / "out"), "--to", "hf", "--config", cfg,
                 "--model-class", "BertModel"]) == 2
    _one_line_error(capsys, "only 0 of the", "no tensors at all")
    # only the embeddings of a BERT: 5 of 39
    from jaxbert.convert.safetensors_io import iter_safetensors, write_safetensors
    some = [(k, v) for k, v in iter_safetensors(mlm_dir / "model.safetensors") if k.startswith("bert.embeddings.")]
    write_safetensors(tmp_path / "some.safetensors", [(k, v.shape, v.dtype) for k, v in some], some)
    with pytest.raises(ConversionError, match=r"only 5 of the \d+ BertForMaskedLM tensors"):
        jaxbert.from_pretrained(tmp_path / "some.safetensors", config=cfg)
    assert not (tmp_path / "out").exists()


def test_an_all_integer_checkpoint_is_refused(mlm_dir, tmp_path, capsys):
    from jaxbert.convert.safetensors_io import iter_safetensors, write_safetensors
    ints = [(k, v.astype(np.int32)) for k, v in iter_safetensors(mlm_dir / "model.safetensors")]
    (tmp_path / "int").mkdir()
    write_safetensors(tmp_path / "int" / "model.safetensors", [(k, v.shape, v.dtype) for k, v in ints], ints)
    (tmp_path / "int" / "config.json").write_text((mlm_dir / "config.json").read_text())
    assert main(["convert", str(tmp_path / "int"), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, "every tensor is int32")


def test_config_with_more_layers_than_the_checkpoint_fails_fast(mlm_dir, tmp_path, capsys):
    src = _copy_hf(mlm_dir, tmp_path / "big", num_hidden_layers=1000000)
    t0 = time.perf_counter()
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "hf"]) == 2
    assert time.perf_counter() - t0 < 30  # was 68 s and 5.8 GB before a MemoryError
    _one_line_error(capsys, "num_hidden_layers=1000000", "holds 2 layers")


@pytest.mark.parametrize("field,value,message", [
    ("tie_word_embeddings", "false", "tie_word_embeddings must be true or false, got 'false'"),
    ("hidden_size", "32", "hidden_size must be an integer, got '32'"),
    ("id2label", ["a", "b"], "id2label must be a JSON object"),
    ("layer_norm_eps", "NaN", "layer_norm_eps must be a finite number"),
])
def test_config_types_are_checked_when_read(mlm_dir, tmp_path, capsys, field, value, message):
    src = _copy_hf(mlm_dir, tmp_path / "c", **{field: float("nan") if value == "NaN" else value})
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, src / "config.json", message)


# ---- index files ---------------------------------------------------------------

@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    d = tmp_path_factory.mktemp("sharded") / "hf"
    tiny_hf_model("BertModel", seed=3).save_pretrained(d, max_shard_size="20KB")
    return d


def _with_index(sharded, dst, rewrite):
    dst.mkdir()
    for f in os.listdir(sharded):
        (dst / f).write_bytes((sharded / f).read_bytes())
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    index["weight_map"] = rewrite(index["weight_map"])
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    return dst


@pytest.mark.parametrize("name", ["../x.safetensors", "ABSOLUTE", "/dev/zero", "sub/../../x.safetensors"])
def test_index_shard_names_stay_inside_the_folder(sharded, tmp_path, capsys, name):
    outside = tmp_path / "x.safetensors"
    outside.write_bytes((sharded / sorted(f for f in os.listdir(sharded) if f.startswith("model-"))[0]).read_bytes())
    name = str(outside) if name == "ABSOLUTE" else name
    d = _with_index(sharded, tmp_path / "d", lambda wm: {**wm, next(iter(wm)): name})
    assert main(["convert", str(d), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, "outside its folder", name)


def test_index_shards_may_be_symlinks_to_elsewhere(sharded, tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    d = tmp_path / "snap"
    d.mkdir()
    for f in os.listdir(sharded):  # as a Hugging Face cache lays out a snapshot
        (blobs / f).write_bytes((sharded / f).read_bytes())
        (d / f).symlink_to(blobs / f)
    _, params = jaxbert.from_pretrained(d)
    _, ref = jaxbert.from_pretrained(sharded)
    np.testing.assert_array_equal(params["embeddings"]["word_embeddings"]["embedding"],
                                  ref["embeddings"]["word_embeddings"]["embedding"])


def test_weight_map_that_is_a_list_is_a_named_error(sharded, tmp_path, capsys):
    d = _with_index(sharded, tmp_path / "d", lambda wm: sorted(wm.values()))
    assert main(["convert", str(d), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, "model.safetensors.index.json: weight_map must be a JSON object")


# ---- file formats --------------------------------------------------------------

@pytest.mark.parametrize("header,message", [
    ({"a": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 0]}}, "negative dimension"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, "overlaps the bytes of another tensor"),
    ({"a": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}}, "unreadable or unsupported header entry"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
])
def test_safetensors_reader_rejects_what_the_format_forbids(tmp_path, header, message):
    path = tmp_path / "bad.safetensors"
    _raw_safetensors(path, (header if isinstance(header, str) else json.dumps(header)).encode(), bytes(32))
    with pytest.raises(SafetensorsError, match=message) as e:
        SafetensorsReader(path)
    assert str(path) in str(e.value)


def test_msgpack_with_integer_keys_and_malformed_jaxbert_json(mlm_dir, tmp_path, capsys):
    from flax import serialization
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "flax_model.msgpack").write_bytes(serialization.msgpack_serialize({"bert": {0: np.zeros(3)}}))
    (tmp_path / "m" / "config.json").write_text((mlm_dir / "config.json").read_text())
    assert main(["convert", str(tmp_path / "m"), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, "flax_model.msgpack: params key bert/0 is a int")
    jx = tmp_path / "jx"
    assert main(["convert", str(mlm_dir), str(jx), "--to", "jaxbert"]) == 0
    capsys.readouterr()
    (jx / "jaxbert.json").write_text("{not json")
    assert main(["convert", str(jx), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, jx / "jaxbert.json", "not a readable jaxbert.json")


# ---- nothing lost, round two: wrong dtypes and two sources for one weight ----------------

def test_an_integer_weight_is_refused_naming_it_and_its_dtype(mlm_dir, tmp_path, capsys):
    from jaxbert.convert.safetensors_io import iter_safetensors, write_safetensors
    key = "bert.embeddings.LayerNorm.weight"
    tensors = [(k, v.view(np.int32) if k == key else v) for k, v in iter_safetensors(mlm_dir / "model.safetensors")]
    src = _copy_hf(mlm_dir, tmp_path / "one_int")
    write_safetensors(src / "model.safetensors", [(k, v.shape, v.dtype) for k, v in tensors], tensors)
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, src / "model.safetensors", f"{key} is int32")
    assert not (tmp_path / "out").exists()
    # An integer tensor that is no weight (a buffer, an unknown key) is fine.
    tensors = [(k, v) for k, v in iter_safetensors(mlm_dir / "model.safetensors")]
    tensors += [("bert.embeddings.position_ids", np.arange(12, dtype=np.int64)[None]),
                ("extra.counter", np.array([3], np.int32))]
    write_safetensors(src / "model.safetensors", [(k, v.shape, v.dtype) for k, v in tensors], tensors)
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "hf"]) == 0


def test_two_flax_params_for_one_weight_are_refused_naming_both(mlm_dir, tmp_path, capsys):
    from flax import serialization
    _, params = jaxbert.from_pretrained(mlm_dir)
    params = jax.tree_util.tree_map(np.asarray, params)
    ln = params["bert"]["embeddings"]["LayerNorm"]
    ln["weight"] = ln["scale"] + 1  # 'weight' and 'scale' both name bert.embeddings.LayerNorm.weight
    src = _copy_hf(mlm_dir, tmp_path / "flax")
    (src / "model.safetensors").unlink()
    (src / "flax_model.msgpack").write_bytes(serialization.msgpack_serialize(params))
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, "bert/embeddings/LayerNorm/scale and bert/embeddings/LayerNorm/weight",
                    "bert.embeddings.LayerNorm.weight")


def test_one_key_in_two_shards_is_refused(sharded, tmp_path, capsys):
    from jaxbert.convert.safetensors_io import iter_safetensors, write_safetensors
    d = _with_index(sharded, tmp_path / "d", lambda wm: wm)
    first, second = sorted(f for f in os.listdir(d) if f.startswith("model-"))[:2]
    key, value = next(iter_safetensors(d / first))
    tensors = list(iter_safetensors(d / second)) + [(key, value + 1)]
    write_safetensors(d / second, [(k, v.shape, v.dtype) for k, v in tensors], tensors)
    assert main(["convert", str(d), str(tmp_path / "out"), "--to", "hf"]) == 2
    _one_line_error(capsys, f"{key} is given twice")


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_a_roberta_config_without_an_integer_pad_token_id_is_refused(tmp_path, capsys, model_type):
    from tests.helpers.hf_models import tiny_roberta_model
    src = tmp_path / "rob"
    tiny_roberta_model("RobertaForMaskedLM", seed=2).save_pretrained(src)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(pad_token_id=None, model_type=model_type)  # null: read as 'no padding token'
    (src / "config.json").write_text(json.dumps(cfg))
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "jaxbert"]) == 2
    _one_line_error(capsys, src / "config.json", "pad_token_id must be an integer", model_type, "got None")
    assert not (tmp_path / "out").exists()


# ---- the tokenizer travels with a conversion ------------------------------------------

_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz")


def _with_tokenizer(folder):
    """A WordPiece tokenizer saved by transformers (tokenizer.json, vocab.txt and its configs) in folder."""
    import transformers
    vocab = folder.parent / f"{folder.name}-vocab.txt"
    vocab.write_text("".join(w + "\n" for w in _WORDS))
    # transformers 5 names the argument `vocab` (and drops an unknown `vocab_file`, leaving the specials only)
    arg = "vocab_file" if int(transformers.__version__.split(".")[0]) < 5 else "vocab"
    transformers.BertTokenizerFast(**{arg: str(vocab)}).save_pretrained(folder)
    # transformers 5 writes tokenizer.json and tokenizer_config.json only; 4.x's other files are
    # still found in published folders, so they are laid beside them by hand where it wrote none.
    if not (folder / "vocab.txt").exists():
        (folder / "vocab.txt").write_bytes(vocab.read_bytes())
    if not (folder / "special_tokens_map.json").exists():
        (folder / "special_tokens_map.json").write_text(json.dumps(
            {"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]", "sep_token": "[SEP]",
             "unk_token": "[UNK]"}, indent=2) + "\n")
    (folder / "added_tokens.json").write_text("{}\n")
    names = sorted(n for n in os.listdir(folder) if n not in ("config.json", "model.safetensors"))
    assert {"tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"} <= set(names)
    return {n: (folder / n).read_bytes() for n in names}


def test_convert_carries_the_tokenizer_both_ways_and_fill_mask_works_on_the_jaxbert_folder(tmp_path, capsys):
    import transformers
    hf = tmp_path / "hf"
    tiny_hf_model("BertForMaskedLM", seed=4).save_pretrained(hf)
    files = _with_tokenizer(hf)
    assert main(["convert", str(hf), str(tmp_path / "jx"), "--to", "jaxbert"]) == 0
    assert main(["convert", str(tmp_path / "jx"), str(tmp_path / "back"), "--to", "hf"]) == 0
    for d in ("jx", "back"):
        assert {n: (tmp_path / d / n).read_bytes() for n in files} == files, d  # byte for byte
    assert (tmp_path / "jx" / ".jaxbert-output").is_file() and (tmp_path / "back" / ".jaxbert-output").is_file()
    capsys.readouterr()
    assert main(["fill-mask", str(tmp_path / "jx"), "a [MASK] c", "--top-k", "2"]) == 0
    assert capsys.readouterr().out.strip()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    assert tok.convert_ids_to_tokens(tok("a b")["input_ids"]) == ["[CLS]", "a", "b", "[SEP]"]
    # A lone weights file takes the tokenizer beside it; a replaced output gets the new one only.
    assert main(["convert", str(hf / "model.safetensors"), str(tmp_path / "jx"), "--to", "jaxbert",
                 "--overwrite"]) == 0
    assert {n: (tmp_path / "jx" / n).read_bytes() for n in files} == files
    bare = _copy_hf(hf, tmp_path / "bare")  # weights and config only
    assert main(["convert", str(bare), str(tmp_path / "jx"), "--to", "jaxbert", "--overwrite"]) == 0
    assert not any((tmp_path / "jx" / n).exists() for n in files)


def test_convert_of_a_training_workdir_carries_its_run_tokenizer(tmp_path, capsys):
    import orbax.checkpoint as ocp
    from jaxbert.workdir import run_config
    files = _with_tokenizer(tmp_path / "tok")
    model = {"preset": "bert-tiny", "model_class": "BertForMaskedLM",
             "config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "intermediate_size": 24, "max_position_embeddings": 16}}
    module = jaxbert.BertForMaskedLM(run_config({"recipe": {"model": model}}, len(_WORDS), "run")[0])
    ids = np.ones((1, 4), np.int32)
    params = module.init(jax.random.key(0), ids, ids * 0)["params"]
    step = tmp_path / "run" / "checkpoints" / "3"
    with ocp.PyTreeCheckpointer() as ckpt:
        ckpt.save((step / "state").absolute(), {"params": params, "step": np.int32(3)})
    (step / "meta").mkdir()
    (step / "meta" / "metadata").write_text(json.dumps({"recipe": {"model": model,
                                                                  "data": {"tokenizer": str(tmp_path / "tok")}}}))
    assert main(["convert", str(tmp_path / "run"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    assert {n: (tmp_path / "hf" / n).read_bytes() for n in files} == files
    capsys.readouterr()
    assert main(["fill-mask", str(tmp_path / "hf"), "a [MASK] c", "--top-k", "2"]) == 0
