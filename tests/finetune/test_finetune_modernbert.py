"""jaxbert finetune from a ModernBERT source: the task model is the family's head class (ModernBertFor...,
classifier_pooling cls or mean from the source's config), the encoder comes from the source and the head
is fresh; every kind trains on its planted pattern, and the export loads in transformers (the matching
ModernBert class, and its pipelines) and predicts what `jaxbert predict` does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.finetune import loop as loop_lib
from jaxbert.finetune.predict import _featurize, evaluate_file, load_finetuned, predict_file, read_examples, run_model
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from tests.helpers.finetune_data import make_modernbert_source, write_kind
from tests.helpers.transformers4 import QA_PIPELINE, transformers4

QUIET = lambda m: None  # noqa: E731

CLASSES = {"classification": "ModernBertForSequenceClassification", "regression": "ModernBertForSequenceClassification",
           "tokens": "ModernBertForTokenClassification", "qa": "ModernBertForQuestionAnswering",
           "choice": "ModernBertForMultipleChoice"}
# kind -> (source pooling, metric, the least a 2-epoch run reaches; chance: ~0 / ~0.1 / 0.33 / ~0)
SHORT = {"tokens": ("cls", "entity_f1", 0.9), "qa": ("cls", "f1", 0.6), "choice": ("mean", "accuracy", 0.6),
         "regression": ("mean", "pearson", 0.8)}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """pooling -> a tiny ModernBERT source. The mean-pooling one's tokenizer_config names no model inputs
    (a BERT WordPiece config): the export must leave token_type_ids out of it all the same."""
    cls = make_modernbert_source(tmp_path_factory.mktemp("mb-cls"), pooling="cls")
    mean = make_modernbert_source(tmp_path_factory.mktemp("mb-mean"), pooling="mean")
    tc = json.loads((mean / "tokenizer_config.json").read_text())
    tc.pop("model_input_names")
    (mean / "tokenizer_config.json").write_text(json.dumps(tc))
    return {"cls": cls, "mean": mean}


def _torch_outputs(model_dir, class_name, features):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = getattr(transformers, class_name).from_pretrained(str(model_dir)).eval()
    with torch.no_grad():  # no token_type_ids: ModernBERT has none
        return model(**{k: torch.tensor(features.arrays[k], dtype=torch.long) for k in ("input_ids", "attention_mask")})


def _check_export(best, kind, dev, pooling):
    """best/ is the ModernBert class of the kind with the source's pooling; transformers' logits equal ours."""
    config = json.loads((best / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == [CLASSES[kind]]
    assert config["classifier_pooling"] == pooling
    tok_config = json.loads((best / "tokenizer_config.json").read_text())
    assert tok_config["model_input_names"] == ["input_ids", "attention_mask"]
    m = load_finetuned(best)
    assert m.kind == kind and type(m.module).__name__ == CLASSES[kind]
    examples = read_examples(m, dev, labelled=False)[:12]
    features, _ = _featurize(m, examples)
    ours = run_model(m, features)
    theirs = _torch_outputs(best, CLASSES[kind], features)
    mask = features.arrays["attention_mask"].astype(bool)
    if kind == "qa":
        for key in ("start_logits", "end_logits"):
            np.testing.assert_allclose(ours[key][mask], getattr(theirs, key).numpy()[mask], rtol=1e-4, atol=1e-4)
    elif kind == "tokens":
        np.testing.assert_allclose(ours["logits"][mask], theirs.logits.numpy()[mask], rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(ours["logits"], theirs.logits.numpy(), rtol=1e-4, atol=1e-4)
    return m, examples


def test_classification_learns_through_the_cli_and_the_pipeline_predicts_as_jaxbert_predict(sources, tmp_path,
                                                                                            capsys):
    transformers = pytest.importorskip("transformers")
    train, dev = write_kind(tmp_path / "data", "classification", n_train=192, n_eval=64)
    wd = tmp_path / "wd"
    assert main(["finetune", "--task", "classification", "--train", str(train), "--eval", str(dev),
                 "--model", str(sources["cls"]), "--workdir", str(wd), "--config", "finetune-tiny",
                 "--set", "train.epochs=4"]) == 0
    out = capsys.readouterr().out
    assert "-> ModernBertForSequenceClassification (2 labels)" in out
    assert "initialised fresh" in out and "classifier.kernel" in out and "model." not in out.split(
        "initialised fresh")[1].splitlines()[0]  # the head only: the encoder came from the source
    best_score = json.loads((wd / "eval.json").read_text())["best"]["score"]
    assert best_score >= 0.9  # chance is about 0.5
    best = wd / "best"
    m, examples = _check_export(best, "classification", dev, "cls")
    preds = predict_file(best, dev)
    assert evaluate_file(best, None, dev)["accuracy"] == pytest.approx(best_score, abs=1e-6)  # jaxbert predict's
    pipe = transformers.pipeline("text-classification", model=str(best), device="cpu")
    assert type(pipe.model).__name__ == "ModernBertForSequenceClassification"
    got = pipe([e.text_a for e in examples])
    assert [g["label"] for g in got] == [p["label"] for p in preds[:len(examples)]]
    np.testing.assert_allclose([g["score"] for g in got], [p["score"] for p in preds[:len(examples)]], rtol=1e-4)


def _trainer(source_of, tmp_path_factory, n_eval: int):
    """kind -> (summary, best export, eval file), each kind fine-tuned once (finetune-tiny, 2 epochs)
    from source_of(kind), shared by the tests that read the same run."""
    cache = {}

    def get(kind):
        if kind not in cache:
            tmp = tmp_path_factory.mktemp(f"run-{kind}")
            train, dev = write_kind(tmp / "data", kind, n_train=160, n_eval=n_eval)
            summary = loop_lib.finetune(load("finetune-tiny", ["train.epochs=2"]), parse_task(kind, train, [dev]),
                                        source_of(kind), tmp / "run", log=QUIET)
            cache[kind] = (summary, tmp / "run" / "best", dev)
        return cache[kind]
    return get


@pytest.fixture(scope="module")
def trained(sources, tmp_path_factory):
    return _trainer(lambda kind: sources[SHORT[kind][0]], tmp_path_factory, n_eval=48)


@pytest.mark.parametrize("kind", list(SHORT))
def test_each_other_kind_trains_and_its_export_loads_in_transformers(trained, kind):
    pooling, metric, least = SHORT[kind]
    summary, best, dev = trained(kind)
    assert summary["status"] == "finished"
    assert summary["best"]["evals"]["dev"][metric] >= least, summary["history"]
    _check_export(best, kind, dev, pooling)
    preds = predict_file(best, dev)
    transformers = pytest.importorskip("transformers")
    if kind == "tokens":
        pipe = transformers.pipeline("token-classification", model=str(best), device="cpu")
        m = load_finetuned(best, weights=False)
        for e, p in zip(read_examples(m, dev, labelled=False)[:8], preds):
            tagged = {r["word"] for r in pipe(" ".join(e.words)) if r["entity"] != "O"}
            assert tagged == {w for w, t in zip(p["words"], p["tags"]) if t != "O"}


@transformers4(QA_PIPELINE)
def test_the_qa_export_answers_in_transformers_question_answering_pipeline(trained):
    """The qa run's export is checked above on every version; this is the pipeline part only."""
    transformers = pytest.importorskip("transformers")
    _, best, dev = trained("qa")
    preds = predict_file(best, dev)
    pipe = transformers.pipeline("question-answering", model=str(best), device="cpu")
    examples = read_examples(load_finetuned(best, weights=False), dev, labelled=False)[:8]
    answers = [pipe(question=e.question, context=e.context, max_answer_len=30)["answer"] for e in examples]
    assert np.mean([a.strip() == p["answer"] for a, p in zip(answers, preds)]) >= 0.9


def test_mean_pooling_differs_from_cls_pooling_on_the_same_weights(sources, tmp_path):
    """The pooling the source's config names is the one the task model uses: the same encoder and head
    under the other pooling gives other logits (so a run that ignored it would show)."""
    from jaxbert.finetune.model import load_task_model
    from jaxbert.model.classes import build_model
    a = load_task_model(sources["mean"], "classification", ["x", "y"])
    assert a.config.classifier_pooling == "mean" and a.class_name == "ModernBertForSequenceClassification"
    ids = np.array([[2, 7, 8, 9, 3, 0, 0]]), np.array([[1, 1, 1, 1, 1, 0, 0]])
    mean = build_model(a.class_name, a.config).apply({"params": a.params}, ids[0], None, ids[1]).logits
    cls = build_model(a.class_name, a.config.replace(classifier_pooling="cls")).apply(
        {"params": a.params}, ids[0], None, ids[1]).logits
    assert not np.allclose(np.asarray(mean), np.asarray(cls), atol=1e-6)
    assert not any(p.startswith("model.") for p in a.fresh) and "classifier.kernel" in a.fresh


@pytest.fixture(scope="module")
def bpe_source(tmp_path_factory):
    """A tiny ModernBERT with the project's byte-level BPE: a word mid-sentence is "Ġword" there."""
    return make_modernbert_source(tmp_path_factory.mktemp("mb-bpe"), tokenizer_kind="bpe")


@pytest.fixture(scope="module")
def bpe_trained(bpe_source, tmp_path_factory):
    return _trainer(lambda kind: bpe_source, tmp_path_factory, n_eval=32)


@pytest.mark.parametrize("kind", ["tokens", pytest.param("qa", marks=transformers4(QA_PIPELINE))])
def test_a_bpe_model_s_export_pipelines_give_predict_s_tags_and_answers_exactly(bpe_trained, kind):
    """Fine-tuned with the byte-level BPE, the export's transformers pipeline (given the sentence as
    text) tags every word as `jaxbert predict` does, at the word's own first character, and answers
    with predict's exact text (no leading space). Words once went in without their space marker, so
    jaxbert trained on "ma rker" while the pipeline saw "Ġmarker". (The qa run's training and predict
    are checked on every version by the test after this one; only the pipeline comparison needs 4.x.)"""
    transformers = pytest.importorskip("transformers")
    _, metric, least = SHORT[kind]
    summary, best, dev = bpe_trained(kind)
    assert summary["best"]["evals"]["dev"][metric] >= least, summary["history"]
    preds = predict_file(best, dev)
    examples = read_examples(load_finetuned(best, weights=False), dev, labelled=False)
    assert len(preds) == len(examples) == 32
    if kind == "tokens":
        pipe = transformers.pipeline("token-classification", model=str(best), device="cpu", ignore_labels=[])
        for e, p in zip(examples, preds):
            starts = [len(" ".join(e.words[:i])) + (i > 0) for i in range(len(e.words))]
            by_start = {r["start"]: r["entity"] for r in pipe(" ".join(e.words))}
            assert [by_start.get(s) for s in starts] == p["tags"], (e.words, p["tags"])
        assert sum(t != "O" for p in preds for t in p["tags"]) >= 16  # the pattern was learnt: tags to agree on
    else:
        pipe = transformers.pipeline("question-answering", model=str(best), device="cpu")
        answers = [pipe(question=e.question, context=e.context, max_answer_len=30)["answer"] for e in examples]
        assert answers == [p["answer"] for p in preds]
        assert all(a and a == a.strip() for a in answers)


def test_a_bpe_model_s_qa_run_learns_and_predict_answers_without_a_leading_space(bpe_trained):
    """The byte-level BPE qa run on every transformers version (its pipeline comparison above needs 4.x):
    it learns, and predict's answers are text spans with no space marker's leading space."""
    _, metric, least = SHORT["qa"]
    summary, best, dev = bpe_trained("qa")
    assert summary["best"]["evals"]["dev"][metric] >= least, summary["history"]
    answers = [p["answer"] for p in predict_file(best, dev)]
    assert len(answers) == 32 and all(a and a == a.strip() for a in answers), answers
