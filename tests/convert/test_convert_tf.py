"""Original TensorFlow BERT checkpoints, read without TensorFlow.

tests/fixtures/tf_bert was written by TensorFlow's own Saver (tests/helpers/tf_checkpoints.py)
with reference outputs from transformers' load_tf_weights_in_bert, so these
tests run everywhere; the last one re-makes both with TensorFlow where it is
installed.
"""

import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import jaxbert
from jaxbert.cli.main import main as cli_main
from jaxbert.convert import ConversionError, convert
from jaxbert.convert.tf_checkpoint import TFCheckpointSource
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
