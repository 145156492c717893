"""Original TensorFlow BERT checkpoints, read without TensorFlow.

tests/fixtures/tf_bert was written by TensorFlow's own Saver (tests/helpers/tf_checkpoints.py)
with reference outputs from transformers' load_tf_weights_in_bert, so these
tests run everywhere; the last one re-makes both with TensorFlow where it is
installed.
"""

import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import jaxbert
from jaxbert.cli.main import main as cli_main
from jaxbert.convert import ConversionError, convert
from jaxbert.convert.tf_checkpoint import TFCheckpointSource, read_index
from tests.helpers.tfevents import masked_crc
from tests.helpers.tf_checkpoints import FIXTURE, WITH_SLOTS, reference_inputs, reference_outputs, tf_variables, \
    write_tf_checkpoint

SKIPPED = {f"{n}/{slot}" for n in WITH_SLOTS for slot in ("adam_m", "adam_v")} | {"global_step"}


def _expected_state_dict() -> dict:
    """The fixture's variables under transformers' names, spelled out here independently of the reader."""
    out = {}
    for name, value in tf_variables().items():
        if name in SKIPPED:
            continue
        key = name.replace("/", ".")
        for i in range(2):
            key = key.replace(f"layer_{i}.", f"layer.{i}.")
        if key.endswith(".kernel"):
            key, value = key[:-len("kernel")] + "weight", value.T
        key = (key.replace(".gamma", ".weight").replace(".beta", ".bias")
               .replace("output_bias", "bias").replace("output_weights", "weight"))
        if key.endswith("_embeddings"):
            key += ".weight"
        out[key] = value
    return out


def test_reader_gives_every_weight_bit_for_bit_and_skips_optimizer_slots():
    src = TFCheckpointSource(FIXTURE / "bert_model.ckpt")
    got = dict(src.items())
    expected = _expected_state_dict()
    assert sorted(got) == sorted(expected)
    assert len(got) == 46  # 5 embedding + 2 x 16 layer + 2 pooler + 4 transform + 1 bias + 2 NSP
    for key, value in expected.items():
        assert got[key].dtype == np.float32 and got[key].shape == value.shape, key
        assert np.array_equal(got[key], value), key
    # The NSP weight is stored [out, in] and must not be transposed; the kernels are.
    assert got["cls.seq_relationship.weight"].shape == (2, 8)
    assert {name for name, _ in src.skipped} == SKIPPED
    assert dict(src.skipped)["global_step"] == "training step counter"


def _ours(module, params, inputs):
    out = module.apply({"params": params}, inputs["input_ids"], inputs["token_type_ids"],
                       attention_mask=inputs["attention_mask"], output_hidden_states=True)
    return np.asarray(out.prediction_logits), np.asarray(out.seq_relationship_logits)


def test_from_pretrained_on_the_folder_matches_transformers_reference():
    ref = np.load(FIXTURE / "reference.npz")
    inputs = reference_inputs()
    assert all(np.array_equal(ref[k], v) for k, v in inputs.items())
    module, params, report = jaxbert.from_pretrained(FIXTURE, return_report=True)
    assert type(module).__name__ == "BertForPreTraining"  # from its keys: bert_config.json names no class
    assert not report.missing and not report.unused
    assert {k for k, _ in report.ignored} == SKIPPED  # reported, not silently dropped
    mlm, nsp = _ours(module, params, inputs)
    real = inputs["attention_mask"].astype(bool)
    assert np.abs(mlm - ref["prediction_logits"])[real].max() < 1e-5
    assert np.abs(nsp - ref["seq_relationship_logits"]).max() < 1e-5


def test_convert_to_hf_loads_in_transformers_and_matches_reference(tmp_path):
    report = convert(FIXTURE / "bert_model.ckpt.index", tmp_path / "hf", "hf")  # the .index file works too
    assert len(report.loaded) == 46
    model = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ref = np.load(FIXTURE / "reference.npz")
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in reference_inputs().items()})
    _assert_close_1e6(out, ref)


def _assert_close_1e6(out, ref):
    """Both sides are transformers on the same float32 values, but load_tf_weights_in_bert leaves
    its Linear weights as transposed views, so the matmuls sum in another order: 1e-6 relative to
    the logits' scale (|logits| reach ~5 here, a few float32 ulps)."""
    for name in ("prediction_logits", "seq_relationship_logits"):
        scale = max(1.0, float(np.abs(ref[name]).max()))
        assert np.abs(getattr(out, name).numpy() - ref[name]).max() <= 1e-6 * scale, name


def test_cli_convert_lists_the_skipped_slots(tmp_path, capsys):
    assert cli_main(["convert", str(FIXTURE / "bert_model.ckpt"), str(tmp_path / "jx"), "--to", "jaxbert"]) == 0
    text = capsys.readouterr().out
    assert "ignored: cls/predictions/output_bias/adam_v (optimizer slot" in text
    assert "ignored: global_step (training step counter)" in text
    module, params = jaxbert.from_pretrained(tmp_path / "jx")
    mlm, _ = _ours(module, params, reference_inputs())
    ref = np.load(FIXTURE / "reference.npz")
    real = reference_inputs()["attention_mask"].astype(bool)
    assert np.abs(mlm - ref["prediction_logits"])[real].max() < 1e-5


_NO_TF = """
import sys
for name in ("tensorflow", "torch", "transformers"):
    sys.modules[name] = None  # any import of them fails
import numpy as np, jaxbert
from jaxbert.convert import convert
convert(sys.argv[1], sys.argv[2], "hf")
m, p = jaxbert.from_pretrained(sys.argv[2])
ref = np.load(sys.argv[1] + "/reference.npz")
out = m.apply({"params": p}, ref["input_ids"], ref["token_type_ids"], attention_mask=ref["attention_mask"])
real = ref["attention_mask"].astype(bool)
print(type(m).__name__, float(np.abs(np.asarray(out.prediction_logits) - ref["prediction_logits"])[real].max()))
"""


def test_read_and_converted_with_tensorflow_torch_and_transformers_unimportable(tmp_path):
    out = subprocess.run([sys.executable, "-c", _NO_TF, str(FIXTURE), str(tmp_path / "hf")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    name, diff = out.stdout.split()
    assert name == "BertForPreTraining" and float(diff) < 1e-5


def test_damaged_checkpoints_are_refused_naming_the_file(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(FIXTURE, folder)
    index = folder / "bert_model.ckpt.index"
    index.write_bytes(index.read_bytes()[:-10])  # footer magic gone
    with pytest.raises(ConversionError, match="bert_model.ckpt.index: not a readable TensorFlow"):
        TFCheckpointSource(folder / "bert_model.ckpt")
    shutil.copy(FIXTURE / "bert_model.ckpt.index", index)
    data = folder / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ConversionError, match="data-00000-of-00001: .* runs past the end"):
        jaxbert.from_pretrained(folder)
    data.unlink()
    with pytest.raises(ConversionError, match="data file bert_model.ckpt.data-00000-of-00001 is missing"):
        jaxbert.from_pretrained(folder)


def test_tensorflow_written_checkpoint_matches_load_tf_weights_in_bert(tmp_path):
    pytest.importorskip("tensorflow")
    prefix = write_tf_checkpoint(tmp_path / "tf")
    fresh = dict(TFCheckpointSource(prefix).items())
    stored = dict(TFCheckpointSource(FIXTURE / "bert_model.ckpt").items())
    assert all(np.array_equal(fresh[k], stored[k]) for k in stored)  # the committed fixture is what TF writes
    ref = reference_outputs(prefix)  # transformers' own conversion, through TensorFlow
    convert(tmp_path / "tf", tmp_path / "hf", "hf")
    model = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    theirs = transformers.BertForPreTraining(model.config)
    transformers.load_tf_weights_in_bert(theirs, model.config, str(prefix))
    ours_sd, theirs_sd = model.state_dict(), theirs.state_dict()
    assert sorted(ours_sd) == sorted(theirs_sd)
    assert all(torch.equal(ours_sd[k], theirs_sd[k]) for k in theirs_sd)  # every weight bit for bit
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in reference_inputs().items()})
    _assert_close_1e6(out, ref)
    stored = np.load(FIXTURE / "reference.npz")
    # The stored reference is what this TensorFlow and transformers give (up to float32 summation order).
    assert np.allclose(stored["prediction_logits"], ref["prediction_logits"], rtol=0, atol=1e-6)


# ---- damaged and hostile checkpoints: one named line, exit 2, nothing allocated for them ----------------

def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, value) -> bytes:
    """One protobuf field: an int as a varint, bytes length-delimited."""
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    return _varint(number << 3) + _varint(value)


def _entry(e: dict) -> bytes:
    """A BundleEntryProto (the crc32c as TensorFlow stores it: masked, fixed32)."""
    shape = b"".join(_field(2, _field(1, d)) for d in e["shape"])
    out = _field(1, e["dtype"]) + _field(2, shape) + _field(3, e["shard_id"]) + _field(4, e["offset"])
    out += _field(5, e["size"])
    if e.get("crc32c") is not None:
        out += _varint(6 << 3 | 5) + struct.pack("<I", e["crc32c"])
    return out


def _block(rows) -> bytes:
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in rows)
    return body + struct.pack("<II", 0, 1)  # one restart point, at 0


def _write_index(path, header: dict, entries: dict) -> None:
    """An SSTable as TensorFlow writes a bundle's index: one data block, its index block, the footer."""
    rows = [(b"", _field(1, header.get("num_shards", 1)))]
    rows += [(name.encode(), _entry(e)) for name, e in sorted(entries.items())]
    out = b""

    def add(block):
        nonlocal out
        handle = _varint(len(out)) + _varint(len(block))
        out += block + b"\0" + struct.pack("<I", masked_crc(block + b"\0"))
        return handle

    data_handle = add(_block(rows))
    meta_handle = add(_block([]))
    index_handle = add(_block([(rows[-1][0] + b"\xff", data_handle)]))
    footer = meta_handle + index_handle
    path.write_bytes(out + footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", 0xdb4775248b80fb57))


@pytest.fixture
def ckpt(tmp_path):
    """(folder, entries, rewrite) over a copy of the fixture; rewrite(header, entries) writes its index anew."""
    folder = tmp_path / "ckpt"
    shutil.copytree(FIXTURE, folder)
    index = folder / "bert_model.ckpt.index"
    header, entries = read_index(index)

    def rewrite(new_header=None, new_entries=None):
        _write_index(index, new_header or header, new_entries or entries)
    return folder, entries, rewrite


def _refused(capsys, folder, tmp_path, *needles):
    assert cli_main(["convert", str(folder), str(tmp_path / "out"), "--to", "hf"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    assert not (tmp_path / "out").exists()
    return err


def test_the_index_writer_here_writes_what_the_reader_reads(ckpt, tmp_path):
    folder, entries, rewrite = ckpt
    rewrite()  # the fixture's entries, written by this test's writer: still converts
    assert cli_main(["convert", str(folder), str(tmp_path / "out"), "--to", "hf"]) == 0


def test_tensor_bytes_that_fail_their_crc32c_are_refused_by_name(ckpt, tmp_path, capsys):
    folder, entries, _ = ckpt
    data = folder / "bert_model.ckpt.data-00000-of-00001"
    e = entries["bert/pooler/dense/kernel"]
    raw = bytearray(data.read_bytes())
    raw[e["offset"]:e["offset"] + e["size"]] = bytes(e["size"])  # zeroed: same length, any shape check passes
    data.write_bytes(bytes(raw))
    _refused(capsys, folder, tmp_path, "bert/pooler/dense/kernel", "crc32c", data.name)


def test_a_flipped_byte_in_the_index_fails_its_block_checksum(ckpt, tmp_path, capsys):
    folder, _, _ = ckpt
    index = folder / "bert_model.ckpt.index"
    raw = bytearray(index.read_bytes())
    at = raw.index(b"pooler/dense/bias") + 1  # keys are prefix-compressed: "bert/" is shared
    raw[at] ^= 0x01  # bert/pooler/... now reads bert/pnoler/...: a valid table, a wrong one
    index.write_bytes(bytes(raw))
    _refused(capsys, folder, tmp_path, "bert_model.ckpt.index", "crc32c")


def test_an_integer_tf_tensor_is_refused_naming_it_and_its_dtype(ckpt, tmp_path, capsys):
    folder, entries, rewrite = ckpt
    entries["bert/pooler/dense/kernel"]["dtype"] = 3  # int32 over the same float bytes (crc32c still right)
    rewrite()
    _refused(capsys, folder, tmp_path, "bert.pooler.dense.weight is int32")


def test_two_tf_names_for_one_weight_are_refused_naming_both(ckpt, tmp_path, capsys):
    folder, entries, rewrite = ckpt
    entries["bert/pooler/dense/weight"] = dict(entries["bert/pooler/dense/kernel"])
    rewrite()
    _refused(capsys, folder, tmp_path, "bert/pooler/dense/kernel and bert/pooler/dense/weight",
             "bert.pooler.dense.weight")


@pytest.mark.parametrize("case", ["overflow", "negative", "shards", "size", "past_end", "shard_id"])
def test_hostile_index_entries_are_refused_before_reading(ckpt, tmp_path, capsys, case):
    folder, entries, rewrite = ckpt
    e, header = entries["bert/pooler/dense/kernel"], {"num_shards": 1}
    if case == "overflow":  # the element count wraps to 0 in int64: it "fits" 0 bytes
        e["shape"], e["size"] = (2**62, 4), 0
        needles = ("bert/pooler/dense/kernel", f"needs {2**66} bytes, its entry holds 0")
    elif case == "negative":
        e["shape"] = (2**64 - 1, 8)
        needles = ("bert/pooler/dense/kernel", "negative dimension")
    elif case == "shards":
        header = {"num_shards": 10**12}
        needles = ("declares 1000000000000 data shards", "1 data files are present")
    elif case == "size":  # a shape that does not fit the entry's byte count
        e["shape"] = (100000, 100000)
        needles = ("bert/pooler/dense/kernel", "needs 40000000000 bytes, its entry holds 256")
    elif case == "past_end":  # shape and size agree, the data file is far shorter
        e["shape"], e["size"] = (100000, 100000), 40000000000
        needles = ("bert/pooler/dense/kernel runs past the end", "data-00000-of-00001")
    else:
        e["shard_id"] = 7
        needles = ("bert/pooler/dense/kernel is in data shard 7", "shards are 0..0 (bert_model.ckpt.data-00000-of-00001)")
    rewrite(header, entries)
    _refused(capsys, folder, tmp_path, *needles)


def test_a_huge_declared_shape_in_a_sparse_file_is_compared_with_the_config_before_reading(ckpt, tmp_path, capsys):
    folder, entries, rewrite = ckpt
    data = folder / "bert_model.ckpt.data-00000-of-00001"
    e = entries["bert/pooler/dense/kernel"]
    e["shape"], e["offset"], e["size"] = (100000, 100000), data.stat().st_size, 40000000000
    os.truncate(data, e["offset"] + e["size"])  # sparse: 37 GiB long, a few KB on disk
    rewrite()
    _refused(capsys, folder, tmp_path, "bert.pooler.dense.weight: checkpoint [100000, 100000]",
             "BertForPreTraining expects [8, 8]")
