"""Pretraining on packed documents (data.packing: documents): the loss falls, a run resumed from a
checkpoint ends with the params of the uninterrupted run, and data of another packing is refused."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from jaxbert.cli.main import main
from tests.helpers.runs import checkpoint_steps, final_params, metric_rows, train_losses, write_recipe

SENTENCES = ["the return statement leaves the function", "a for loop iterates over a list",
             "the break statement ends the loop", "a dictionary maps keys to values",
             "strings are sequences of characters", "an exception stops the program"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Short documents (one to three sentences) as documents-packed and stream data, rows of 32."""
    root = tmp_path_factory.mktemp("packed")
    rng = np.random.default_rng(0)
    docs = [" . ".join(rng.choice(SENTENCES, int(rng.integers(1, 4)))) + " ." for _ in range(400)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    train_tokenizer([str(root / "corpus.txt")], 120, root / "tok")
    for mode in ("documents", "stream"):
        prepare([str(root / "corpus.txt")], str(root / "tok"), str(root / mode), max_length=32,
                validation_fraction=0.1, progress=False, packing=mode)
    return root


def _recipe(prepared, path, mode="documents", data_mode="documents"):
    return write_recipe(path, data={"source": "prepared", "dir": str(prepared / data_mode), "seq_len": 32,
                                    "mask_rate": 0.2, "packing": mode},
                        model={"preset": "bert-tiny", "config": {
                            "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                            "intermediate_size": 64, "vocab_size": 120, "max_position_embeddings": 32,
                            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}},
                        optim={"learning_rate": 1e-2, "warmup_steps": 2, "schedule": "linear"},
                        train={"steps": 16, "per_device_batch_size": 8, "log_every": 1, "eval_every": 0,
                               "eval_batches": 2},
                        checkpoint={"every_steps": 8, "keep": 5})


def test_packed_pretraining_learns_and_resumes_exactly(prepared, tmp_path, capsys):
    recipe = _recipe(prepared, tmp_path / "packed.yaml")
    ref = tmp_path / "ref"
    assert main(["train", "--config", str(recipe), "--workdir", str(ref)]) == 0
    assert checkpoint_steps(ref) == [8, 16]
    losses = train_losses(ref)
    assert len(losses) == 16 and losses[-4:].mean() < losses[:4].mean() - 0.5, losses
    evals = [r["eval_mlm_loss"] for r in metric_rows(ref) if "eval_mlm_loss" in r]
    assert evals and evals[-1] < np.log(120)  # held-out packed rows below the uniform guess

    # a run cut after step 8 (its later checkpoint gone) resumes there and ends where the reference did
    cut = tmp_path / "cut"
    shutil.copytree(ref, cut)
    shutil.rmtree(cut / "checkpoints" / "16")
    capsys.readouterr()
    assert main(["train", "--config", str(recipe), "--workdir", str(cut)]) == 0
    assert "resumed from" in capsys.readouterr().out
    pa, pb = final_params(ref), final_params(cut)
    assert pa.keys() == pb.keys()
    for k in pa:
        assert np.array_equal(pa[k], pb[k]), k
    np.testing.assert_array_equal(train_losses(cut), losses)


def test_data_of_another_packing_is_refused_before_a_step(prepared, tmp_path, capsys):
    recipe = _recipe(prepared, tmp_path / "mixed.yaml", mode="documents", data_mode="stream")
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err
    assert "prepared with packing 'stream'" in err and "data.packing 'documents'" in err
    assert not checkpoint_steps(tmp_path / "run")


def test_recipe_packing_choices_and_the_abstract_batch():
    from jaxbert.engine.recipe import RecipeError
    from jaxbert.train import recipe as recipe_lib
    from jaxbert.plan.compile_step import abstract_batch
    r = recipe_lib.load("tiny-demo", ["data.packing=documents"])
    assert r.data.packing == "documents" and recipe_lib.load("tiny-demo").data.packing == "stream"
    batch = abstract_batch(r, 4, None)
    assert batch["segment_ids"].shape == (1, 4, r.data.seq_len)
    assert "segment_ids" not in abstract_batch(recipe_lib.load("tiny-demo"), 4, None)
    with pytest.raises(RecipeError, match="data.packing: 'tight' is not one of"):
        recipe_lib.load("tiny-demo", ["data.packing=tight"])
    with pytest.raises(RecipeError, match="synthetic data take packing stream"):
        recipe_lib.load("tiny-demo", ["data.packing=documents", "data.source=synthetic"])
    with pytest.raises(RecipeError, match="nsp sentence pairs"):
        recipe_lib.load("tiny-demo", ["data.packing=none", "data.nsp=true", "model.model_class=BertForPreTraining"])
