"""Task kinds are registered modules: a kind added from outside the package (one object, one
registry entry) is read, trained, scored, exported and evaluated through the same code as the
shipped kinds, with its own metric."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

from jaxbert.finetune import kinds
from jaxbert.finetune.kinds.classification import Classification
from jaxbert.finetune.loop import finetune
from jaxbert.finetune.predict import evaluate_file, load_finetuned
from jaxbert.finetune.recipe import load
from jaxbert.finetune.row_files import TaskDataError
from jaxbert.finetune.task_data import parse_task, read_task_data
from tests.helpers.finetune_data import classification_rows, make_source, write_jsonl


def balanced_accuracy(predictions, references) -> float:
    """Mean over the classes of the references of the fraction of each class predicted right."""
    p, r = np.asarray(predictions), np.asarray(references)
    return float(np.mean([np.mean(p[r == c] == c) for c in np.unique(r)]))


class Binary(Classification):
    """Two-class classification scored by balanced accuracy (a constant guess scores 0.5, whatever the mix)."""

    name = "binary"
    metric_names = ("balanced_accuracy",)
    main_metric = "balanced_accuracy"

    def check_labels(self, path, labels) -> None:
        if len(labels) != 2:
            raise TaskDataError(f"{path}: {self.name} needs exactly 2 labels, found {list(labels)}")

    def score_against(self, metric_names, predictions, references) -> dict:
        assert tuple(metric_names) == self.metric_names
        return {"balanced_accuracy": balanced_accuracy(predictions, references)}


@pytest.fixture
def binary(monkeypatch):
    """The toy kind, registered for one test (monkeypatch takes it out again)."""
    kind = Binary()
    monkeypatch.setitem(kinds.KINDS, kind.name, kind)
    yield kind


def test_a_kind_registered_from_outside_trains_end_to_end_with_its_own_metric(binary, tmp_path):
    (tmp_path / "src").mkdir()
    src = make_source(tmp_path / "src")
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(192, 1))
    dev = write_jsonl(tmp_path / "dev.jsonl", classification_rows(64, 2))
    spec = parse_task("binary", train, [dev])
    summary = finetune(load("finetune-tiny"), spec, src, tmp_path / "run", log=lambda m: None)
    assert summary["status"] == "finished" and summary["main"] == ("dev", "balanced_accuracy")
    first, best = summary["history"][0]["evals"]["dev"], summary["best"]["evals"]["dev"]
    assert set(first) >= {"balanced_accuracy", "loss"} and "macro_f1" not in first  # its metric, not classification's
    assert best["balanced_accuracy"] >= 0.9, summary["history"]  # chance: 0.5
    # the exported model is recognised as the toy kind (its task record) and scored with its metric
    model = load_finetuned(tmp_path / "run" / "best", weights=False)
    assert model.kind == "binary" and model.labels == ("fruit", "water")
    again = evaluate_file(tmp_path / "run" / "best", None, dev)
    assert again == {"balanced_accuracy": pytest.approx(best["balanced_accuracy"], abs=1e-6)}


def test_the_toy_kind_checks_its_labels_and_is_gone_when_unregistered(binary, tmp_path):
    rows = [{"sentence": "a b", "label": x} for x in ("x", "y", "z")]
    spec = parse_task("binary", write_jsonl(tmp_path / "t.jsonl", rows), [tmp_path / "t.jsonl"])
    with pytest.raises(TaskDataError, match=r"t.jsonl: binary needs exactly 2 labels"):
        read_task_data(spec)
    del kinds.KINDS["binary"]
    with pytest.raises(TaskDataError, match="unknown task 'binary'"):
        parse_task("binary", tmp_path / "t.jsonl", [tmp_path / "t.jsonl"])
    with pytest.raises(TaskDataError, match="unknown task kind 'binary'"):
        kinds.get("binary")
    kinds.KINDS["binary"] = binary  # monkeypatch removes it again


def test_every_shipped_kind_is_a_kind_under_its_own_name():
    modules = {m.name for m in pkgutil.iter_modules(kinds.__path__)} - {"base"}
    assert set(kinds.KINDS) == modules  # every kind module is registered, and nothing else is
    for name, kind in kinds.KINDS.items():
        assert isinstance(kind, kinds.Kind) and kind.name == name
        assert kind.head and kind.metrics()[1]


MOVED_INTO_KINDS = [("readers", name, "kinds.tokens.reader")
                    for name in ("read_tokens", "TokenExample", "CONLL_SUFFIXES")]
MOVED_INTO_KINDS += [("readers", name, "kinds.choice") for name in ("read_choice", "ChoiceExample")]
MOVED_INTO_KINDS += [("features", name, "kinds.tokens.features")
                     for name in ("token_features", "word_labels", "EMPTY_WORD_TAG")]
MOVED_INTO_KINDS += [("features", "choice_features", "kinds.choice")]


@pytest.mark.parametrize("old,name,new", MOVED_INTO_KINDS)
def test_a_kinds_reader_and_features_live_with_it_alone(old, name, new):
    """0.3.0 removed the old paths 0.2.0 deprecated: the names live in the kind's module only."""
    shared = importlib.import_module(f"jaxbert.finetune.{old}")
    assert name in vars(importlib.import_module(f"jaxbert.finetune.{new}"))
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(shared, name)


@pytest.mark.parametrize("module", ["jaxbert.finetune.squad", "jaxbert.finetune.qa_features", "jaxbert.engine.metrics"])
def test_the_forwarding_modules_0_2_0_deprecated_are_gone(module):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_the_kinds_former_keywords_and_finetune_optim_section_are_gone():
    from jaxbert.finetune import readers, recipe
    from jaxbert.finetune.kinds.qa import QAOptions
    from jaxbert.finetune.task_data import TaskSpec
    qa = kinds.get("qa")
    assert not hasattr(qa, "legacy_options")
    with pytest.raises(AttributeError, match="no attribute 'FinetuneOptimSection'"):
        recipe.FinetuneOptimSection
    with pytest.raises(TypeError, match="version_2"):
        TaskSpec("qa", "train.json", {"dev": "dev.json"}, version_2=True)
    with pytest.raises(TypeError, match="version_2"):
        readers.read_task(qa, "train.json", {}, version_2=False)
    with pytest.raises(TypeError, match="version_2"):
        qa.read("train.json", version_2=False)
    with pytest.raises(TypeError, match="stride"):
        qa.featurize([], None, 64, stride=16)
    with pytest.raises(TypeError, match="n_best"):
        qa.decode({}, None, None, None, QAOptions(), n_best=2)
