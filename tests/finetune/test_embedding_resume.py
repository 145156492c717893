"""Embedding runs keep Orbax checkpoints and resume: a run stopped mid-epoch and started again in its
workdir ends with the params (the learned temperature among them), evaluations and logged losses of one
that never stopped, bit for bit, with dropout on and two training files drawn a batch per source. The
eval file holds STS pairs alone, so the best checkpoint is picked by Spearman (checked against
sentence-transformers and scipy on WORKDIR/best). A workdir of another recipe, data or kind is refused
in one line, nothing written."""

from __future__ import annotations

import json
import random

import jax
import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.finetune.kinds.embedding.run import train_embedding
from jaxbert.finetune.kinds.embedding.step import LOGIT_KEY
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from jaxbert.workdir import read_params
from tests.finetune.test_embedding_run import TOPICS, _rows
from tests.helpers.cli import one_line
from tests.helpers.finetune_data import WORDS, make_source, write_jsonl, write_kind

st = pytest.importorskip("sentence_transformers")
scipy_stats = pytest.importorskip("scipy.stats")
STEPS, STOP = 9, 5  # 3 steps per epoch (2 batches of a.jsonl, 1 of b.jsonl): stopped mid-epoch


def _sts(n, seed):
    """Pairs of a query and a passage, scored 2 for the same topic plus 1 for the same object."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        t1, t2 = rng.choice(TOPICS), rng.choice(TOPICS)
        w1, w2 = rng.choice(WORDS[:20]), rng.choice(WORDS[:20])
        rows.append({"q": f"{t1} {w1}", "p": f"the {t2} {w2} {t2}", "label": 2 * (t1 == t2) + (w1 == w2)})
    return rows


def _overrides(root, **changed):
    sources = changed.pop("sources", f"[{{file: '{root}/a.jsonl', weight: 2}}, {{file: '{root}/b.jsonl'}}]")
    return [f"train.steps={STEPS}", "train.log_every=2", "data.max_length=16", f"data.sources={sources}",
            "data.batch_per_source=true", "kinds.embedding.learn_temperature=true",
            *(f"{k.replace('__', '.')}={v}" for k, v in changed.items())]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    src = make_source(root, layers=1, dropout=0.1)
    write_jsonl(root / "a.jsonl", _rows(40, 0))
    write_jsonl(root / "b.jsonl", _rows(24, 1))
    sts = write_jsonl(root / "sts.jsonl", _sts(32, 2))
    spec = parse_task("embedding", None, [str(sts)], text_columns=("q", "p", "n"))
    recipe = load("finetune-tiny", _overrides(root))
    quiet = lambda m: None
    stopped = train_embedding(recipe, spec, src, root / "a", stop_at=STOP, log=quiet)
    resumed = train_embedding(recipe, spec, src, root / "a", log=quiet)
    straight = train_embedding(recipe, spec, src, root / "b", log=quiet)
    return root, src, sts, stopped, resumed, straight


def test_a_stopped_run_resumes_to_the_same_params_and_metrics_bit_for_bit(runs):
    root, _, _, stopped, resumed, straight = runs
    assert (stopped["status"], stopped["step"]) == ("stopped", STOP)
    assert resumed["step"] == straight["step"] == STEPS
    a, meta = read_params(root / "a")
    b, _ = read_params(root / "b")
    assert meta["step"] == STEPS and LOGIT_KEY in a
    assert not np.isclose(float(a[LOGIT_KEY]), np.log(20.0))  # the temperature was learned, and resumed with it
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert resumed["history"] == straight["history"]  # every evaluation, with its temperature
    assert [h["step"] for h in straight["history"]] == [0, 3, 6, 9]

    def logged(workdir):  # the training rows of metrics.jsonl, times left out
        rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in ("elapsed_s", "steps_per_s")} for r in rows if "loss" in r]
    assert [r["step"] for r in logged(root / "b")] == [2, 4, 6, 8, 9]
    assert logged(root / "a") == logged(root / "b")  # the window across the stop (steps 5, 6) carried over
    assert (root / "a" / "best" / "model.safetensors").read_bytes() == \
        (root / "b" / "best" / "model.safetensors").read_bytes()


def test_an_sts_only_eval_file_picks_the_best_checkpoint_by_spearman(runs):
    root, _, sts, _, _, straight = runs
    doc = json.loads((root / "b" / "eval.json").read_text())
    assert doc["main"] == {"eval": "sts", "metric": "spearman"} and straight["main"] == ("sts", "spearman")
    scores = {h["step"]: h["evals"]["sts"]["spearman"] for h in straight["history"]}
    assert len(set(scores.values())) >= 3  # the evaluations score differently
    best = max((s for s in scores if s > 0), key=scores.get)  # the first of equal scores stays best
    assert doc["best"]["step"] == best and doc["best"]["score"] == scores[best]
    # WORKDIR/best is that step's model: its Spearman, by sentence-transformers and scipy
    rows = [json.loads(line) for line in sts.read_text().splitlines()]
    model = st.SentenceTransformer(str(root / "b" / "best"), device="cpu")
    q = model.encode([r["q"] for r in rows], convert_to_numpy=True)
    p = model.encode([r["p"] for r in rows], convert_to_numpy=True)
    cos = np.sum(q * p, axis=1) / np.linalg.norm(q, axis=1) / np.linalg.norm(p, axis=1)
    assert scipy_stats.spearmanr(cos, [r["label"] for r in rows]).statistic == pytest.approx(scores[best], abs=1e-4)


@pytest.mark.parametrize("case, needles", [
    ("options", ("cannot be resumed by this run", "the kind's options", "'temperature': 0.05", "0.1")),
    ("weights", ("cannot be resumed by this run", "the training files (data.sources)", "'weight': 2.0")),
    ("kind", ("was saved with another recipe and does not fit this one",)),
])
def test_a_workdir_of_another_recipe_data_or_kind_is_refused_in_one_line(runs, capsys, case, needles):
    root, src, sts, *_ = runs
    work = root / "b"
    before = {p: p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file() and p.name != ".jaxbert-train.lock"}
    if case == "kind":  # a classification run into the embedding run's workdir
        train, dev = write_kind(root / "cls", "classification", n_train=32, n_eval=16)
        args = ["finetune", "--task", "classification", "--model", str(src), "--train", str(train), "--eval",
                str(dev), "--config", "finetune-tiny", "--workdir", str(work)]
    else:
        changed = ({"kinds__embedding__temperature": 0.1} if case == "options" else
                   {"sources": f"[{{file: '{root}/a.jsonl', weight: 1}}, {{file: '{root}/b.jsonl'}}]"})
        args = ["finetune", "--task", "embedding", "--model", str(src), "--eval", str(sts), "--text-columns", "q",
                "p", "n", "--config", "finetune-tiny", "--workdir", str(work)]
        args += [a for o in _overrides(root, **changed) for a in ("--set", o)]
    assert main(args) == 2
    one_line(capsys.readouterr(), "finetune", str(work), *needles)
    after = {p: p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file() and p.name != ".jaxbert-train.lock"}
    assert after == before
