"""The shipped tiny three-phase demo (modernbert-tiny-phase1/2/3) as a chain of runs, each phase from the
one before's workdir, on a small corpus and a few steps per phase: phase 1 grows its batch, phase 2
loads every param of phase 1 and runs at 4x the length with global RoPE theta 160,000, phase 3 decays
its learning rate as 1 - sqrt; every phase leaves a held-out figure."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from jaxbert.cli.main import main
from jaxbert.data.prepare import prepare
from jaxbert.data.tokenizer import train_tokenizer
from tests.helpers.runs import REPO, metric_rows

SENTENCES = ["the return statement leaves the function", "a for loop iterates over a list",
             "the break statement ends the loop", "a dictionary maps keys to values",
             "the import statement loads a module", "a class defines methods and attributes"]
QUIET = ["outputs.plot=false", "outputs.export=false", "outputs.fill_mask=[]", "train.log_every=1",
         "train.eval_batches=1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A BPE tokenizer of the demo's kind and the corpus prepared in rows of 64 and of 256."""
    root = tmp_path_factory.mktemp("phases")
    rng = np.random.default_rng(0)
    docs = [" . ".join(rng.choice(SENTENCES, 6)) + " ." for _ in range(300)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    train_tokenizer([str(root / "corpus.txt")], 300, root / "tok", kind="bpe")
    for length in (64, 256):
        prepare([str(root / "corpus.txt")], str(root / "tok"), str(root / f"data-{length}"), max_length=length,
                validation_fraction=0.1, progress=False)
    return root


def _train(phase: int, workdir, *overrides) -> str:
    recipe = REPO / "configs" / "train" / f"modernbert-tiny-phase{phase}.yaml"
    sets = [arg for kv in (*QUIET, *overrides) for arg in ("--set", kv)]
    assert main(["train", "--config", str(recipe), "--workdir", str(workdir), *sets]) == 0
    return yaml.safe_load((workdir / "recipe.yaml").read_text())


def test_the_tiny_three_phase_demo_runs_as_a_chain(corpus, tmp_path, capsys):
    w1, w2, w3 = tmp_path / "phase1", tmp_path / "phase2", tmp_path / "phase3"
    _train(1, w1, f"data.dir={corpus / 'data-64'}", "train.steps=4", "train.batch_warmup_tokens=1000")
    # 8 sequences of 64 a step until 1,000 tokens are in (step 3), then the full 16
    assert [r["batch_size"] for r in metric_rows(w1) if "batch_size" in r] == [8, 8, 16, 16]
    capsys.readouterr()

    r2 = _train(2, w2, f"data.dir={corpus / 'data-256'}", f"data.tokenizer={corpus / 'tok'}",
                f"model.init_from={w1}", "train.steps=3")
    log = capsys.readouterr().out
    assert "T=256" in log and "init_from: loaded" in log and "freshly initialised" not in log
    assert r2["model"]["config"]["global_rope_theta"] == 160000.0 and r2["data"]["seq_len"] == 256

    _train(3, w3, f"data.dir={corpus / 'data-256'}", f"data.tokenizer={corpus / 'tok'}",
           f"model.init_from={w2}", "train.steps=4")
    # 1-sqrt from phase 2's 5e-4 to 0.001 of it: step k (1-based) takes count k - 1 of 4
    lrs = [r["learning_rate"] for r in metric_rows(w3) if "learning_rate" in r]
    assert lrs == pytest.approx([5e-7 + (5e-4 - 5e-7) * (1 - math.sqrt(k / 4)) for k in range(4)], rel=1e-5)
    for workdir in (w1, w2, w3):  # each phase's held-out figure
        evals = [r for r in metric_rows(workdir) if "eval_loss" in r]
        assert evals and np.isfinite(evals[-1]["eval_loss"]) and 0 <= evals[-1]["eval_mlm_accuracy"] <= 1
