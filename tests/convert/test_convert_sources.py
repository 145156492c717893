"""Every checkpoint source: .bin/.pt, sharded sets, HF Flax msgpack, jaxbert directories, the CLI."""

import json
import os
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch
import transformers
from flax.traverse_util import flatten_dict

import jaxbert
from jaxbert.cli.main import main as cli_main
from jaxbert.convert import ConversionError
from tests.helpers.hf_models import tiny_hf_model
from tests.helpers.transformers4 import BIN, FLAX, transformers4


@pytest.fixture(scope="module")
def mlm(tmp_path_factory):
    """A tiny BertForMaskedLM saved by transformers, and the params jaxbert reads from it."""
    d = tmp_path_factory.mktemp("mlm")
    hf = tiny_hf_model("BertForMaskedLM", seed=21)
    hf.save_pretrained(d / "hf")
    _, params = jaxbert.from_pretrained(d / "hf")
    return hf, d, flatten_dict(params)


def _assert_same_params(params, expected_flat):
    got = flatten_dict(params)
    assert sorted(got) == sorted(expected_flat)
    for k, v in got.items():
        assert v.dtype == expected_flat[k].dtype, k
        assert np.array_equal(np.asarray(v).view(np.uint8), np.asarray(expected_flat[k]).view(np.uint8)), k


def test_bin_and_lone_files_with_separate_config(mlm, tmp_path):
    hf, d, expected = mlm
    (tmp_path / "bin").mkdir()
    torch.save(hf.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "bin" / "config.json").write_text((d / "hf" / "config.json").read_text())
    _assert_same_params(jaxbert.from_pretrained(tmp_path / "bin")[1], expected)

    (tmp_path / "lone").mkdir()
    torch.save({"state_dict": hf.state_dict()}, tmp_path / "lone" / "weights.pt")  # a training-script wrapper
    with pytest.raises(ConversionError, match="no config.json beside it; pass config="):
        jaxbert.from_pretrained(tmp_path / "lone" / "weights.pt")
    module, params = jaxbert.from_pretrained(tmp_path / "lone" / "weights.pt", config=d / "hf" / "config.json")
    assert type(module).__name__ == "BertForMaskedLM"
    _assert_same_params(params, expected)


def test_bf16_bin_keeps_bits(tmp_path):
    hf = tiny_hf_model("BertModel", seed=22, dtype=torch.bfloat16)
    hf.config.save_pretrained(tmp_path)  # a .bin as torch.save writes it (transformers 5 writes none)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    _, params = jaxbert.from_pretrained(tmp_path)
    q = np.asarray(params["encoder"]["layer"]["0"]["attention"]["self"]["query"]["kernel"])
    assert q.dtype == ml_dtypes.bfloat16
    ref = hf.encoder.layer[0].attention.self.query.weight.detach().view(torch.int16).numpy().T
    assert np.array_equal(q.view(np.int16), ref)


@pytest.mark.parametrize("safe", [True, pytest.param(False, marks=transformers4(BIN))])
def test_sharded_sets_written_by_transformers(mlm, tmp_path, safe):
    hf, _, expected = mlm
    hf.save_pretrained(tmp_path, max_shard_size="20KB", safe_serialization=safe)
    index = "model.safetensors.index.json" if safe else "pytorch_model.bin.index.json"
    assert len(set(json.loads((tmp_path / index).read_text())["weight_map"].values())) > 2
    _assert_same_params(jaxbert.from_pretrained(tmp_path)[1], expected)


def test_sharded_write_loads_in_transformers_and_stale_shards_go(mlm, tmp_path):
    hf, d, _ = mlm
    module, params = jaxbert.from_pretrained(d / "hf", scan_layers=True)
    jaxbert.save_pretrained(tmp_path, module, params, max_shard_size="30KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert index["metadata"]["total_size"] == sum(v.numel() * 4 for v in hf.state_dict().values()) - 4 * (99 * 32 + 99)  # no tied copies
    back, info = transformers.BertForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert list(info["missing_keys"]) == [] and list(info["unexpected_keys"]) == []  # sets in transformers 5
    for k, v in hf.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    jaxbert.save_pretrained(tmp_path, module, params)  # unsharded over the sharded set
    assert sorted(p.name for p in tmp_path.iterdir()) == [".jaxbert-output", "config.json", "model.safetensors"]
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]


@transformers4(FLAX)
def test_hf_flax_msgpack(mlm, tmp_path):
    _, d, expected = mlm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flax_model = transformers.FlaxBertForMaskedLM.from_pretrained(d / "hf", from_pt=True)
    flax_model.save_pretrained(tmp_path)
    assert (tmp_path / "flax_model.msgpack").exists()
    module, params = jaxbert.from_pretrained(tmp_path, strict=True)
    _assert_same_params(params, expected)
    with pytest.warns(jaxbert.convert.ConversionWarning, match="cls.predictions.transform.dense.weight"):
        _, from_file = jaxbert.from_pretrained(tmp_path / "flax_model.msgpack", "BertModel")  # head unused
    assert np.array_equal(from_file["embeddings"]["word_embeddings"]["embedding"],
                          expected[("bert", "embeddings", "word_embeddings", "embedding")])


_NO_TORCH = """
import sys
sys.modules["torch"] = None; sys.modules["transformers"] = None  # any import of them fails
import numpy as np, jaxbert
m, p = jaxbert.from_pretrained(sys.argv[1], scan_layers=True)
m2, p2 = jaxbert.from_pretrained(sys.argv[1])
k = p["bert"]["encoder"]["layer"]["attention"]["self"]["query"]["kernel"]
k2 = p2["bert"]["encoder"]["layer"]["1"]["attention"]["self"]["query"]["kernel"]
print(type(m).__name__, m.options.scan_layers, m2.options.scan_layers, k.dtype, k.shape, bool(np.array_equal(k[1], k2)))
"""


def test_jaxbert_directory_round_trip_without_torch(mlm, tmp_path):
    _, d, expected = mlm
    module, params = jaxbert.from_pretrained(d / "hf", dtype="bf16", scan_layers=True)
    jaxbert.save_pretrained(tmp_path, module, params, format="jaxbert")
    meta = json.loads((tmp_path / "jaxbert.json").read_text())
    assert meta["model_class"] == "BertForMaskedLM" and meta["scan_layers"] and meta["dtype"] == "bfloat16"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", _NO_TORCH, str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    # Saved scanned; from_pretrained gives the layout it is asked for.
    assert out.stdout.split() == ["BertForMaskedLM", "True", "False", "bfloat16", "(2,", "32,", "32)", "True"]
    module2, params2 = jaxbert.from_pretrained(tmp_path, scan_layers=True)
    for (k, a), b in zip(sorted(flatten_dict(params).items()), [v for _, v in sorted(flatten_dict(params2).items())]):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b)), k


def test_cli_converts_both_ways_and_fails_loudly(tmp_path, capsys):
    hf = tiny_hf_model("BertModel", seed=23)
    hf.save_pretrained(tmp_path / "hf")
    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "jx"), "--to", "jaxbert"]) == 0
    out = capsys.readouterr().out
    assert "loaded: 39 tensors (39 float32)" in out and "time:" in out
    assert cli_main(["convert", str(tmp_path / "jx"), str(tmp_path / "back"), "--to", "hf", "--dtype", "bf16"]) == 0
    assert "loaded: 39 tensors (39 float32), cast to bfloat16" in capsys.readouterr().out
    back = transformers.BertModel.from_pretrained(tmp_path / "back", torch_dtype=torch.bfloat16)
    assert torch.equal(back.pooler.dense.weight, hf.pooler.dense.weight.to(torch.bfloat16))

    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "mlm"), "--to", "hf",
                     "--model-class", "BertForMaskedLM"]) == 0
    out = capsys.readouterr().out
    assert "initialised (missing from the checkpoint): cls/predictions/bias [99]" in out
    assert "unused: pooler.dense.weight (BertForMaskedLM has no pooler)" in out
    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "x"), "--to", "hf",
                     "--model-class", "BertForMaskedLM", "--strict"]) == 2  # bad input
    assert "missing cls.predictions.bias" in capsys.readouterr().err
    assert cli_main(["convert", str(tmp_path / "nope"), str(tmp_path / "x"), "--to", "hf"]) == 2
    assert "nope: no such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
