"""A pretraining recipe's outputs.downstream: `jaxbert train` fine-tunes its final checkpoint on
each named task and adds the scores to metrics.jsonl and its summary; bad items are refused
when the recipe is read."""

from __future__ import annotations

import json

import pytest

from jaxbert.cli.main import main
from jaxbert.train.recipe import RecipeError, from_dict
from tests.helpers.finetune_data import make_source, write_kind
from tests.helpers.runs import TINY, write_recipe

CONFIG = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
          "vocab_size": 256, "max_position_embeddings": 32, "hidden_dropout_prob": 0.0,
          "attention_probs_dropout_prob": 0.0}


def test_train_runs_the_downstream_tasks_on_its_final_checkpoint(tmp_path, capsys):
    src = make_source(tmp_path)  # only its tokenizer (vocabulary 200 <= 256) is used
    train, dev = write_kind(tmp_path / "data", "classification", n_train=32, n_eval=16)
    item = {"task": "classification", "train": str(train), "eval": str(dev), "tokenizer": str(src),
            "config": "finetune-tiny", "set": ["data.max_length=16", "train.epochs=1"]}
    recipe = write_recipe(tmp_path / "r.yaml", model={"preset": "bert-tiny", "config": CONFIG},
                          train={"steps": 4}, outputs={"plot": False, "downstream": [item]})
    workdir = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(workdir)]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("downstream classification:"))
    rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    score = rows[-1]["downstream_classification_dev_accuracy"]
    assert rows[-1]["step"] == 4 and 0 <= score <= 1 and f"{score:.4f}" in line
    assert (workdir / "downstream" / "classification" / "best" / "config.json").is_file()


@pytest.mark.parametrize("item, named", [
    ({"task": "glue/sst2"}, "data"), ({"task": "classification", "train": "t.jsonl"}, "eval"),
    ({"task": "glue/sst2", "data": "d", "epochs": 3}, "epochs"), ("glue/sst2", "mapping"), ({"data": "d"}, "task")])
def test_bad_downstream_items_are_refused_by_key(item, named):
    data = json.loads(json.dumps(TINY))
    data["outputs"]["downstream"] = [item]
    with pytest.raises(RecipeError, match=named):
        from_dict(data)
