"""A task kind is one unit: its options are typed and travel with the exported model, and a kind
with its own reader, features, loss, decoding and metric is added from outside the package by
registering one object (this file defines a multi-label classifier and registers it; nothing
else changes)."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.errors import InputError
from jaxbert.finetune import kinds
from jaxbert.finetune.features import text_features
from jaxbert.finetune.kinds.qa import QAOptions
from jaxbert.finetune.loop import finetune
from jaxbert.finetune.predict import _featurize, evaluate_file, load_finetuned, predict_file, read_examples, run_model
from jaxbert.finetune.readers import TextExample
from jaxbert.finetune.recipe import load
from jaxbert.finetune.row_files import TaskDataError
from jaxbert.finetune.task_data import parse_task
from tests.helpers.finetune_data import WORDS, make_source, write_jsonl, write_kind

QUIET = dict(log=lambda m: None)


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


# --- QA's options are recorded with the model ---------------------------------------------------

def test_qa_options_of_the_recipe_are_recorded_and_predict_and_evaluate_decode_with_them(src, tmp_path):
    train, dev = write_kind(tmp_path / "data", "qa", n_train=64, n_eval=24)
    recipe = load("finetune-tiny", ["kinds.qa.n_best=2", "kinds.qa.max_answer_length=1", "train.steps=6"])
    summary = finetune(recipe, parse_task("qa", train, [dev]), src, tmp_path / "run", **QUIET)
    best = tmp_path / "run" / "best"
    want = QAOptions(stride=16, max_query_length=16, n_best=2, max_answer_length=1, version_2=False)
    record = json.loads((best / "config.json").read_text())["jaxbert_task"]
    assert record["options"] == dataclasses.asdict(want)
    m = load_finetuned(best)
    assert m.kind is kinds.get("qa") and m.options == want
    # the model's outputs decoded as training did, and with QA's defaults: they differ (else this proves nothing)
    examples = read_examples(m, dev, labelled=True)
    features, windows = _featurize(m, examples)
    out = run_model(m, features)
    recorded = m.kind.decode(out, features, windows, None, want)["predictions"]
    defaults = m.kind.decode(out, features, windows, None, QAOptions(stride=16, max_query_length=16))["predictions"]
    assert recorded != defaults
    assert max(len(m.tokenizer.encode(a, add_special_tokens=False).ids) for a in recorded.values()) <= 1
    assert max(len(m.tokenizer.encode(a, add_special_tokens=False).ids) for a in defaults.values()) > 1
    # predict and evaluate take the recorded options, and evaluate agrees with training's own evaluation
    rows = predict_file(best, dev)
    assert {r["id"]: r["answer"] for r in rows} == recorded
    scores = evaluate_file(best, None, dev)
    assert scores == pytest.approx({k: float(v) for k, v in m.kind.score(("squad",), recorded, examples).items()})
    assert scores["f1"] == pytest.approx(summary["best"]["evals"]["dev"]["f1"], abs=1e-6)


def test_the_data_sections_old_qa_keys_still_set_qas_options_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"data.n_best.*kinds.<kind>.<key>"):
        recipe = load("finetune-glue", ["data.n_best=5", "data.stride=9"])
    assert recipe.options_for(kinds.get("qa")) == QAOptions(stride=9, n_best=5)
    assert recipe.options_for(kinds.get("tokens")).stride == 9
    assert "n_best" not in recipe.to_dict()["data"]  # recipe.yaml shows them where they live now
    with pytest.raises(InputError, match=r"kinds.qa.nbest: unknown key; expected one of \['max_answer_length'"):
        load("finetune-glue", ["kinds.qa.nbest=5"])
    with pytest.raises(InputError, match=r"kinds.classification.stride: unknown key"):
        load("finetune-glue", ["kinds.classification.stride=5"])
    with pytest.raises(InputError, match=r"kinds.qa.max_answer_length: must be > 0, got 0"):
        load("finetune-glue", ["kinds.qa.max_answer_length=0"])


# --- a multi-label kind, added from this file ---------------------------------------------------

TOPICS = ("apple", "river", "cloud")  # a sentence is about each topic whose word it holds


@dataclass(frozen=True)
class TaggedText:
    id: str
    text: str
    topics: tuple[int, ...]  # indices into the label names


def topic_rows(n: int, seed: int) -> list[dict]:
    rng, pool = random.Random(seed), [w for w in WORDS[:24] if w not in TOPICS]
    rows = []
    for _ in range(n):
        chosen = [t for t in TOPICS if rng.random() < 0.5]
        words = [rng.choice(pool) for _ in range(5)]
        for t in chosen:
            words.insert(rng.randrange(len(words) + 1), t)
        rows.append({"sentence": " ".join(words), "topics": chosen})
    return rows


def micro_f1(predictions: np.ndarray, references: np.ndarray) -> float:
    """F1 over every (row, label) decision: 2 TP / (2 TP + FP + FN)."""
    p, r = np.asarray(predictions, bool), np.asarray(references, bool)
    tp = np.sum(p & r)
    return float(2 * tp / max(1, 2 * tp + np.sum(p & ~r) + np.sum(~p & r)))


class MultiLabel(kinds.Kind):
    """Any number of topics per sentence: one sigmoid per label, scored by micro F1."""

    name = "multilabel"
    head = "ForSequenceClassification"
    problem_type = "multi_label_classification"
    named_labels = True
    metric_names = ("micro_f1",)
    main_metric = "micro_f1"

    def read_file(self, path, labels, labelled, table):
        rows = [json.loads(line) for line in open(path) if line.strip()]
        names = labels or tuple(sorted({t for r in rows for t in r["topics"]}))
        for n, row in enumerate(rows, 1):
            unknown = set(row.get("topics", [])) - set(names)
            if unknown:
                raise TaskDataError(f"{path}: line {n} has topics {sorted(unknown)} not among {list(names)}")
        return [TaggedText(f"{path}:{n}", r["sentence"], tuple(names.index(t) for t in r.get("topics", [])))
                for n, r in enumerate(rows, 1)], names

    def make_features(self, examples, tok, max_length, options, labels):
        f = text_features([TextExample(e.id, e.text, None, 0) for e in examples], tok, max_length)
        hot = np.zeros((len(examples), len(labels)), np.float32)  # one column per label of the task
        for i, e in enumerate(examples):
            hot[i, list(e.topics)] = 1.0
        f.arrays["labels"] = hot
        return f, None

    def sums(self, out, batch):
        w = self.weights(batch)
        logits = out.logits.astype(jnp.float32)  # [B, K]: one binary decision per label, averaged over them
        y = batch["labels"]
        bce = -jnp.mean(y * jax.nn.log_sigmoid(logits) + (1 - y) * jax.nn.log_sigmoid(-logits), -1)
        return {"loss_sum": jnp.sum(bce * w), "weight": jnp.sum(w)}

    def decode_outputs(self, outputs, features, windows, labels, options):
        return {"predictions": outputs["logits"] > 0, "scores": None}

    def references(self, examples, labels=None):
        return np.array([[i in e.topics for i in range(len(labels))] for e in examples])

    def score_against(self, metric_names, predictions, references):
        return {"micro_f1": micro_f1(predictions, references)}

    def inputs(self, example, columns):
        return {"sentence": example.text}

    def prediction(self, i, example, decoded, labels):
        return {"topics": [labels[k] for k in np.flatnonzero(decoded["predictions"][i])]}


@pytest.fixture
def multilabel(monkeypatch):
    kind = MultiLabel()
    monkeypatch.setitem(kinds.KINDS, kind.name, kind)  # the registry line
    yield kind


def test_a_multi_label_kind_registered_from_a_test_trains_and_is_evaluated_with_its_metric(multilabel, src,
                                                                                           tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", topic_rows(192, 1))
    dev = write_jsonl(tmp_path / "dev.jsonl", topic_rows(64, 2))
    summary = finetune(load("finetune-tiny"), parse_task("multilabel", train, [dev]), src, tmp_path / "run", **QUIET)
    assert summary["status"] == "finished" and summary["main"] == ("dev", "micro_f1")
    best = summary["best"]["evals"]["dev"]
    # saying "every topic" scores 2p/(1+p) ~ 0.67 at p = 0.5, a coin 0.5; the sentence's own words score 1
    assert best["micro_f1"] >= 0.8 and best["micro_f1"] > summary["history"][0]["evals"]["dev"]["micro_f1"], \
        summary["history"]
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification" and config["id2label"] == {
        "0": "apple", "1": "cloud", "2": "river"}
    # the saved model is recognised as this kind (exact head + problem_type), not as classification
    m = load_finetuned(tmp_path / "run" / "best", weights=False)
    assert m.kind is multilabel and kinds.recognising(m.config) == [multilabel]
    # the targets are sized by the task's label names, which featurize hands the kind (the model's
    # id2label here, TaskData.labels in training): a file that only mentions apple still gets a column
    # per topic, where the topics of its own examples would give 1
    apple = write_jsonl(tmp_path / "apple.jsonl", [{"sentence": "apple", "topics": ["apple"]}])
    (only_apple,) = read_examples(m, apple, labelled=True)
    features, _ = _featurize(m, [only_apple])
    assert m.labels == ("apple", "cloud", "river") and features.arrays["labels"].tolist() == [[1.0, 0.0, 0.0]]
    assert evaluate_file(tmp_path / "run" / "best", None, dev) == {"micro_f1": pytest.approx(best["micro_f1"])}
    rows = predict_file(tmp_path / "run" / "best", dev)
    sentences = [json.loads(line)["sentence"] for line in dev.read_text().splitlines()]
    said = np.array([[t in r["topics"] for t in TOPICS] for r in rows])
    truth = np.array([[t in s.split() for t in TOPICS] for s in sentences])
    assert micro_f1(said, truth) == pytest.approx(best["micro_f1"])  # predict's rows are the evaluated decisions
    # unregistered, no kind claims the head (classification does not take it by exclusion)
    del kinds.KINDS["multilabel"]
    with pytest.raises(InputError, match=r"problem_type 'multi_label_classification'\) name no fine-tuned task"):
        load_finetuned(tmp_path / "run" / "best", weights=False)
    kinds.KINDS["multilabel"] = multilabel  # monkeypatch removes it again


def test_every_registered_kind_has_typed_options_with_defaults():
    for name, kind in kinds.KINDS.items():
        options = kind.options()
        assert dataclasses.is_dataclass(options) and kind.options(dataclasses.asdict(options)) == options, name
        with pytest.raises(InputError, match=rf"kinds.{name}.no_such_option: unknown key"):
            kind.options({"no_such_option": 1}, f"kinds.{name}.")
    heads = [(k.head, k.problem_type) for k in kinds.KINDS.values()]
    assert len(set(heads)) == len(heads)  # a saved model is claimed by exactly one shipped kind
