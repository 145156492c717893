"""The pod chain on gs:// (a GCS emulator on 127.0.0.1), through the `jaxbert` verbs:
tokenizer -> prepare -> train -> export -> from_pretrained -> transformers on a local copy."""

from __future__ import annotations

import json

import numpy as np
import yaml
from flax import traverse_util


from tests.helpers.runs import write_recipe
from jaxbert.cli.main import main

TEXT = ("The break statement terminates the nearest enclosing loop, skipping the optional else clause. "
        "A dictionary maps keys to values; the keys must be hashable objects such as strings. "
        "A list is a mutable sequence of items; a tuple is an immutable one. ")


def test_tokenizer_prepare_train_export_load_all_on_a_bucket(gcs, tmp_path, capsys):
    root = gcs.url("chain")
    gfs = gcs.fs()
    for i in range(2):  # a corpus folder in the bucket, two files
        gfs.pipe(f"{root[5:]}/corpus/part-{i}.txt", "\n\n".join(TEXT * 3 for _ in range(20)).encode())
    tok, data, wd, hf = (f"{root}/{name}" for name in ("tok", "data/t32", "runs/p1", "hf/p1"))

    assert main(["tokenizer", "train", "--input", f"{root}/corpus/", "--vocab-size", "200", "--output", tok]) == 0
    assert main(["data", "prepare", "--input", f"{root}/corpus/*.txt", "--tokenizer", tok, "--output", data,
                 "--max-length", "32", "--validation-fraction", "0.1", "--num-workers", "1", "--quiet"]) == 0
    model = {"preset": "bert-tiny", "config": {  # the vocabulary comes from the tokenizer
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 32, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}}
    recipe = write_recipe(tmp_path / "tiny.yaml", model=model,
                          data={"source": "prepared", "seq_len": 32, "mask_rate": 0.25},
                          train={"steps": 12, "per_device_batch_size": 4, "log_every": 3, "eval_every": 6},
                          outputs={"plot": True, "export": False})
    assert main(["train", "--config", str(recipe), "--workdir", wd, "--set", f"data.dir={data}"]) == 0
    assert "finished at step 12" in capsys.readouterr().out

    # everything the run writes is in the bucket, read back with gcsfs alone
    gfs = gcs.fs()
    names = {p[len(wd) - 5 + 1:] for p in gfs.find(wd[5:])}
    assert {"recipe.yaml", "metrics.jsonl", "curves.png"} <= names, names
    assert sorted({n.split("/")[1] for n in names if n.startswith("checkpoints/")}) == ["12", "4", "8"]
    assert [n for n in names if n.startswith("tensorboard/events.out.tfevents.")]
    rows = [json.loads(line) for line in gfs.cat_file(wd[5:] + "/metrics.jsonl").decode().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [3, 6, 9, 12]
    assert yaml.safe_load(gfs.cat_file(wd[5:] + "/recipe.yaml"))["data"]["dir"] == data
    assert gfs.cat_file(wd[5:] + "/curves.png")[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [n for n in names if "data/" in n]  # the prepared data was read where it lies

    assert main(["export", wd, hf]) == 0
    import jaxbert
    from jaxbert.workdir import read_params as restore_params
    trained, _ = restore_params(wd)
    _, exported = jaxbert.from_pretrained(hf, model_class="BertForMaskedLM")
    a = traverse_util.flatten_dict(trained, sep="/")
    b = traverse_util.flatten_dict(jax_to_numpy(exported), sep="/")
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)

    import torch
    import transformers
    local = tmp_path / "hf-copy"
    gcs.fs().get(hf[5:] + "/", str(local) + "/", recursive=True)
    pt = transformers.BertForMaskedLM.from_pretrained(local).eval()
    fast = transformers.AutoTokenizer.from_pretrained(local)
    ids = np.array([fast("the break statement terminates the loop")["input_ids"]], np.int64)
    model, params = jaxbert.from_pretrained(hf, model_class="BertForMaskedLM")
    ours = np.asarray(model.apply({"params": params}, ids.astype(np.int32), np.zeros_like(ids, np.int32)).logits)
    with torch.no_grad():
        theirs = pt(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    assert np.abs(ours).max() > 0.1  # trained weights, not zeros

    # convert reads the bucket too; the jaxbert directory it writes locally holds the same params
    assert main(["convert", hf, str(tmp_path / "jb"), "--to", "jaxbert"]) == 0
    _, converted = jaxbert.from_pretrained(str(tmp_path / "jb"), model_class="BertForMaskedLM")
    c = traverse_util.flatten_dict(jax_to_numpy(converted), sep="/")
    for k in a:
        np.testing.assert_array_equal(a[k], c[k], err_msg=k)


def jax_to_numpy(tree):
    import jax
    return jax.tree_util.tree_map(np.asarray, tree)
