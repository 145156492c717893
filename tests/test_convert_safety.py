"""Untrusted and broken files: refused with an error naming the file, and no code runs."""

import json
import pathlib
import pickle

import numpy as np
import pytest
import torch

import jaxbert
from jaxbert.convert import ConversionError
from tests._fixtures import tiny_hf_model


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
