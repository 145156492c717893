"""jaxbert finetune end to end on made data with a tiny model: every kind learns its planted
pattern, compiles one step per bucket, resumes bit for bit, exports a directory transformers
loads and agrees with, and refuses bad input before writing anything."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.engine import loop as engine_loop
from jaxbert.finetune import kinds
from jaxbert.finetune import loop as loop_lib
from jaxbert.finetune.predict import evaluate_file, load_finetuned, predict_file, run_model
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from jaxbert.workdir import read_params
from tests.helpers.finetune_data import make_source, write_jsonl, write_kind
from tests.helpers.transformers4 import QA_PIPELINE, transformers4

# kind -> (metric of the dev set, the least it must reach; chance is about 0.5 / 0 / 0 / ~0.1 / 0.33)
LEARNS = {"classification": ("accuracy", 0.9), "regression": ("pearson", 0.8), "tokens": ("entity_f1", 0.9),
          "qa": ("f1", 0.6), "choice": ("accuracy", 0.6)}
KIND_SETS: dict = {}  # per-kind --set overrides (none needed)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def runs(src, tmp_path_factory):
    """kind -> (summary, train file, eval file, workdir), each kind trained once for the module."""
    cache = {}

    def get(kind):
        if kind not in cache:
            root = tmp_path_factory.mktemp(kind)
            train, dev = write_kind(root / "data", kind, n_train=192, n_eval=64)
            spec = parse_task(kind, train, [dev])
            recipe = load("finetune-tiny", KIND_SETS.get(kind, []))
            summary = loop_lib.finetune(recipe, spec, src, root / "run", log=lambda m: None)
            cache[kind] = summary, train, dev, root / "run"
        return cache[kind]
    return get


@pytest.mark.parametrize("kind", list(LEARNS))
def test_each_kind_learns_its_planted_pattern(runs, kind):
    summary, _, dev, workdir = runs(kind)
    metric, least = LEARNS[kind]
    assert summary["status"] == "finished"
    assert summary["best"]["evals"]["dev"][metric] >= least, summary["history"]
    doc = json.loads((workdir / "eval.json").read_text())
    assert doc["best"]["score"] == pytest.approx(summary["best"]["evals"]["dev"][metric])
    assert (workdir / "metrics.jsonl").exists() and (workdir / "best" / "config.json").exists()
    # the exported model scores what training measured at its step
    assert evaluate_file(workdir / "best", kind, dev)[metric] == pytest.approx(doc["best"]["score"], abs=1e-6)


def test_compiles_at_most_one_step_per_bucket(src, tmp_path, monkeypatch):
    traced = []
    make = engine_loop.make_train_step

    def counting(spec):
        step = make(spec)

        def wrapped(state, batch, rng, axis_name=None):
            traced.append(batch["input_ids"].shape)  # runs once per trace, not per call
            return step(state, batch, rng, axis_name)
        return wrapped
    monkeypatch.setattr(engine_loop, "make_train_step", counting)
    rng = np.random.default_rng(0)
    rows = [{"sentence": " ".join(["apple" if i % 2 else "river"] + ["cat"] * int(rng.integers(2, 50))),
             "label": "fruit" if i % 2 else "water"} for i in range(96)]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    recipe = load("finetune-tiny", ["train.epochs=2", "train.per_device_batch_size=4"])
    summary = loop_lib.finetune(recipe, parse_task("classification", train, [train]), src, tmp_path / "run",
                                log=lambda m: None)
    assert summary["step"] == 48
    lengths = {s[-1] for s in traced}
    # at most as many shapes as the powers of two (32, 64) of max_length 64, at planned multiples of 8
    assert len(traced) == len(lengths) <= 2 and all(n % 8 == 0 and n <= 64 for n in lengths)


def test_a_stopped_run_resumes_to_the_same_params_bit_for_bit(src, tmp_path, compile_cache):
    train, dev = write_kind(tmp_path / "data", "classification", n_train=96, n_eval=32)
    spec = parse_task("classification", train, [dev])
    recipe = load("finetune-tiny", ["train.steps=14", "checkpoint.every_steps=4"])  # dropout 0.1 in SRC
    quiet = lambda m: None
    first = loop_lib.finetune(recipe, spec, src, tmp_path / "a", stop_at=7, log=quiet)
    assert first["status"] == "stopped" and first["step"] == 7
    resumed = loop_lib.finetune(recipe, spec, src, tmp_path / "a", log=quiet)
    straight = loop_lib.finetune(recipe, spec, src, tmp_path / "b", log=quiet)
    assert resumed["step"] == straight["step"] == 14
    a, _ = read_params(tmp_path / "a")
    b, _ = read_params(tmp_path / "b")
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert resumed["history"] == straight["history"]


def _torch_logits(model_dir, auto, features):
    torch = pytest.importorskip("torch")
    model = auto.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        out = model(**{k: torch.tensor(features.arrays[k], dtype=torch.long)
                       for k in ("input_ids", "token_type_ids", "attention_mask")})
    return out


@pytest.mark.parametrize("kind", ["classification", "tokens", "qa", "choice"])
def test_the_export_loads_in_transformers_and_predicts_the_same(runs, kind):
    transformers = pytest.importorskip("transformers")
    _, _, dev, workdir = runs(kind)
    best = workdir / "best"
    m = load_finetuned(best)
    from jaxbert.finetune.predict import _featurize, read_examples
    examples = read_examples(m, dev, labelled=False)[:16]
    features, windows = _featurize(m, examples)
    ours = run_model(m, features)
    auto = {"classification": transformers.AutoModelForSequenceClassification,
            "tokens": transformers.AutoModelForTokenClassification,
            "qa": transformers.AutoModelForQuestionAnswering,
            "choice": transformers.AutoModelForMultipleChoice}[kind]
    theirs = _torch_logits(best, auto, features)
    mask = features.arrays["attention_mask"].astype(bool)
    if kind == "qa":
        for key in ("start_logits", "end_logits"):
            t = getattr(theirs, key).numpy()
            np.testing.assert_allclose(ours[key][mask], t[mask], rtol=1e-5, atol=1e-5)
    elif kind == "tokens":
        np.testing.assert_allclose(ours["logits"][mask], theirs.logits.numpy()[mask], rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(ours["logits"], theirs.logits.numpy(), rtol=1e-5, atol=1e-5)
    preds = predict_file(best, dev)[:16]
    if kind == "classification":
        pipe = transformers.pipeline("text-classification", model=str(best), device="cpu")
        got = pipe([e.text_a for e in examples])
        assert [g["label"] for g in got] == [p["label"] for p in preds]
        np.testing.assert_allclose([g["score"] for g in got], [p["score"] for p in preds], rtol=1e-5)
    elif kind == "tokens":
        pipe = transformers.pipeline("token-classification", model=str(best), device="cpu")
        for e, p in zip(examples, preds):
            tagged = {r["word"] for r in pipe(" ".join(e.words)) if r["entity"] != "O"}
            assert tagged == {w for w, t in zip(p["words"], p["tags"]) if t != "O"}


@transformers4(QA_PIPELINE)
def test_the_qa_export_answers_in_transformers_question_answering_pipeline_as_predict_does(runs):
    """The qa export's logits are checked above on every version; this is the pipeline part only."""
    transformers = pytest.importorskip("transformers")
    _, _, dev, workdir = runs("qa")
    best = workdir / "best"
    from jaxbert.finetune.predict import read_examples
    examples = read_examples(load_finetuned(best), dev, labelled=False)[:16]
    preds = predict_file(best, dev)[:16]
    pipe = transformers.pipeline("question-answering", model=str(best), device="cpu")
    answers = [pipe(question=e.question, context=e.context, max_answer_len=30)["answer"] for e in examples]
    same = np.mean([a.strip() == p["answer"] for a, p in zip(answers, preds)])
    assert same >= 0.9, list(zip(answers, preds))


BAD_INPUTS = {
    "an eval label training never saw": ("classification", "train.jsonl", "dev.jsonl",
                                          lambda d: (write_jsonl(d / "train.jsonl", [{"sentence": "a", "label": "x"},
                                                                                    {"sentence": "b", "label": "y"}]),
                                                     write_jsonl(d / "dev.jsonl", [{"sentence": "a", "label": "z"}])),
                                          "dev.jsonl"),
    "a missing column": ("classification", "train.jsonl", "dev.jsonl",
                         lambda d: (write_jsonl(d / "train.jsonl", [{"text": "a", "label": "x"}]),
                                    write_jsonl(d / "dev.jsonl", [{"text": "a", "label": "x"}])), "train.jsonl"),
    "an empty file": ("classification", "train.jsonl", "dev.jsonl",
                      lambda d: ((d / "train.jsonl").write_text(""), (d / "dev.jsonl").write_text("")), "train.jsonl"),
    "a ragged TSV row": ("classification", "train.tsv", "dev.tsv",
                         lambda d: ((d / "train.tsv").write_text("sentence\tlabel\na cat\t1\nthe dog\t0\textra\n"),
                                    (d / "dev.tsv").write_text("sentence\tlabel\na cat\t1\n")), "train.tsv"),
    "a QA offset mismatch": ("qa", "train.json", "dev.json",
                             lambda d: tuple((d / n).write_text(json.dumps({"data": [{"paragraphs": [{
                                 "context": "the cat sat", "qas": [{"id": "1", "question": "who",
                                                                    "answers": [{"text": "cat", "answer_start": 0}]}]}]}]}))
                                             for n in ("train.json", "dev.json")), "train.json"),
    "non-IOB tags": ("tokens", "train.jsonl", "dev.jsonl",
                     lambda d: (write_jsonl(d / "train.jsonl", [{"tokens": ["a", "b"], "tags": ["O", "PER"]}]),
                                write_jsonl(d / "dev.jsonl", [{"tokens": ["a"], "tags": ["O"]}])), "train.jsonl"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_nothing_written(src, tmp_path, capsys, case):
    kind, train, dev, write, named = BAD_INPUTS[case]
    write(tmp_path)
    workdir = tmp_path / "run"
    rc = main(["finetune", "--task", kind, "--model", str(src), "--train", str(tmp_path / train),
               "--eval", str(tmp_path / dev), "--workdir", str(workdir), "--config", "finetune-tiny"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and named in err[0], err
    assert not workdir.exists()


def test_unknown_recipe_key_and_list(capsys):
    assert main(["finetune", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("finetune-glue", "finetune-squad", "finetune-tiny"))
    with pytest.raises(Exception, match="train.epoch"):
        load("finetune-tiny", ["train.epoch=3"])
    glue = load("finetune-glue")
    assert (glue.optim.learning_rate, glue.train.per_device_batch_size, glue.train.epochs,
            glue.optim.warmup_ratio, glue.data.max_length, glue.optim.weight_decay) == (2e-5, 32, 3, 0.1, 128, 0.01)
    squad = load("finetune-squad")
    assert (squad.optim.learning_rate, squad.train.epochs, squad.data.max_length) == (3e-5, 2, 384)
    assert squad.options_for(kinds.get("qa")).stride == 128
