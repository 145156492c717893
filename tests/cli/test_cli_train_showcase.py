"""`jaxbert train --list` / `--help` name the shipped recipes; the fill-mask showcase ranks the right word."""

import numpy as np

from tests.helpers.runs import write_recipe
from jaxbert.cli.main import main
from jaxbert.infer.fill_mask import answer_rank


def test_train_list_and_help_name_the_shipped_recipes(capsys):
    assert main(["train", "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in listed]
    assert "tiny-demo" in names and "bert-base-phase1" in names and len(names) == len(set(names)) >= 6
    assert any(line.startswith("tiny-demo") and "default" in line for line in listed)
    try:
        main(["train", "--help"])
    except SystemExit as e:
        assert e.code == 0
    help_text = "".join(capsys.readouterr().out.split())  # argparse wraps lines at hyphens too
    assert "configs/train" not in help_text and "--list" in help_text
    assert all(n in help_text for n in names)


def test_answer_rank_counts_the_tokens_above_it():
    class Vocab:  # the two tokenizer methods answer_rank uses
        def token_to_id(self, t):
            return {"a": 0, "b": 1, "c": 2, "d": 3}.get(t)

    probs = np.array([0.1, 0.5, 0.2, 0.2], np.float32)
    assert [answer_rank(probs, Vocab(), t) for t in "abcd"] == [4, 1, 2, 2]
    assert answer_rank(probs, Vocab(), "zz") is None


def test_a_malformed_fill_mask_entry_is_refused_before_training(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", outputs={"fill_mask": [{"text": "a [MASK]", "answer": True}]})
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 2
    assert "outputs.fill_mask" in capsys.readouterr().err and not (tmp_path / "run").exists()
