"""Issue 34's input and prediction items: hostile files, made in the tests, read the same way by
finetune, predict and evaluate; each refused with one line naming the file, line and value (exit
2, before the weights load), or read right. The fine-tuned models are tiny and untrained (a head
put on the made SRC), some with their head rigged so that what they predict is known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.convert.export import export_params
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.finetune import predict as predict_lib
from jaxbert.finetune import kinds
from jaxbert.finetune.glue import GLUE_TASKS, load_glue
from jaxbert.finetune.model import load_task_model
from jaxbert.finetune.kinds.choice import read_choice
from jaxbert.finetune.kinds.qa import QAOptions
from jaxbert.finetune.kinds.qa.squad import read_squad
from jaxbert.finetune.kinds.tokens import TokensOptions
from jaxbert.finetune.kinds.tokens.reader import TokenExample, read_tokens
from jaxbert.finetune.readers import read_task
from jaxbert.finetune.row_files import TaskDataError
from jaxbert.finetune.task_data import TaskSpec, parse_task, read_task_data
from tests.helpers.cli import one_line
from tests.helpers.finetune_data import make_source, write_jsonl

EMPTY_WORDS = ("\u00ad", "\u200b", "\ufeff", "")  # soft hyphen, zero-width space, byte-order mark, empty


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def tok(src):
    return load_tokenizer(src)


def _finetuned(src, dst, kind, labels=None, rig=None, **info):
    """A fine-tuned model directory: SRC's encoder under an untrained head (rig: the head's bias,
    with a zero kernel, so every row or token predicts argmax(rig))."""
    task = {"kind": kind, "text_columns": ["sentence"], "label_column": "label", "max_length": 32, "stride": 8,
            "max_query_length": 16, "version_2": False, **info}
    loaded = load_task_model(src, kind, labels, task_info=task)
    params = loaded.params
    if rig is not None:
        head = params["classifier"]
        head["kernel"] = np.zeros_like(head["kernel"])
        head["bias"] = np.asarray(rig, dtype=head["bias"].dtype)
    export_params(dst, loaded.config, loaded.class_name, params, src)
    return dst


@pytest.fixture(scope="module")
def models(src, tmp_path_factory):
    """name -> a fine-tuned directory, each made once for the module."""
    cache = {}
    made = {
        "classification": lambda d: _finetuned(src, d, "classification", ("fruit", "water")),
        "pair": lambda d: _finetuned(src, d, "classification", ("no", "yes"), text_columns=["premise", "hypothesis"]),
        "regression": lambda d: _finetuned(src, d, "regression"),
        "tokens-bx": lambda d: _finetuned(src, d, "tokens", ("B-X", "O"), rig=[1.0, 0.0], max_length=16, stride=4),
        "tokens": lambda d: _finetuned(src, d, "tokens", ("B-X", "I-X", "O")),
        "choice": lambda d: _finetuned(src, d, "choice"),
        "qa": lambda d: _finetuned(src, d, "qa"),
        "cola": lambda d: _finetuned(src, d, "classification", GLUE_TASKS["cola"].labels, glue="cola"),
    }

    def get(name):
        if name not in cache:
            cache[name] = made[name](tmp_path_factory.mktemp(name) / "best")
        return str(cache[name])
    return get


def _one_line(capsys, verb, *needles):
    return one_line(capsys.readouterr(), verb, *needles)


@pytest.fixture
def no_weights(monkeypatch):
    """Fails a test that loads a model's weights (refusals must come before)."""
    def refuse(*a, **k):
        raise AssertionError("the weights were loaded before the input was checked")
    monkeypatch.setattr(predict_lib, "from_pretrained", refuse)


def _id_logits(features, vocab_size):
    """[N, L, V] logits one-hot at each token's own id: a token 'predicts' the tag B-<its id>."""
    ids = features.arrays["input_ids"]
    return np.eye(vocab_size, dtype=np.float32)[ids]


def _first_piece_tags(tok, words):
    out = []
    for w in words:
        ids = tok.encode([w], is_pretokenized=True, add_special_tokens=False).ids
        out.append(f"B-{ids[0]}" if ids else "O")
    return out


# --- item 1: words with no word pieces -----------------------------------------------------

def test_tags_are_aligned_by_word_ids_around_every_kind_of_empty_word(tok):
    labels = tuple(f"B-{i}" for i in range(tok.get_vocab_size()))
    sentences = [("\u00ad", "the", "cat", "sat"), ("the", "\u200b", "dog", "ran"), ("\ufeff", "a", "", "bird"),
                 ("red", "house", "\u00ad"), ("", "", "tree")]
    examples = [TokenExample(f"s{i}", words, (0,) * len(words)) for i, words in enumerate(sentences)]
    features, _ = kinds.get("tokens").featurize(examples, tok, 32)
    decoded = kinds.get("tokens").decode({"logits": _id_logits(features, len(labels))}, features, None, labels)
    want = [_first_piece_tags(tok, words) for words in sentences]
    assert [t.count("O") for t in want] == [1, 1, 2, 1, 2]  # the empty words, and only they, have no piece
    assert decoded["predictions"] == want
    assert decoded["empty_words"] == [[0], [1], [0, 2], [2], [0, 1]]
    # scored against gold tags equal to those, entity F1 is 1 (it was 0 with tags shifted onto neighbours)
    names = labels + ("O",)
    gold = [TokenExample(e.id, e.words, tuple(names.index(t) for t in w)) for e, w in zip(examples, want)]
    seqeval = pytest.importorskip("seqeval.metrics")
    got = kinds.get("tokens").score(("entity",), decoded["predictions"], gold, names)
    refs = [[names[t] for t in g.tags] for g in gold]
    assert got["entity_f1"] == pytest.approx(seqeval.f1_score(refs, decoded["predictions"])) == 1.0


def test_predict_and_evaluate_tag_words_after_empty_ones_right(models, tmp_path, capsys):
    model = models("tokens-bx")  # predicts B-X on every token
    rows = []
    for k, empty in enumerate(EMPTY_WORDS):
        words = [empty, "the", "cat", empty, "sat"]
        rows.append({"tokens": words, "tags": ["O" if w in EMPTY_WORDS else "B-X" for w in words]})
    write_jsonl(tmp_path / "dev.jsonl", rows)
    preds = predict_lib.predict_file(model, tmp_path / "dev.jsonl")
    for row, pred in zip(rows, preds):
        assert pred["words"] == row["tokens"] and pred["tags"] == row["tags"]
        assert pred["empty_words"] == [0, 3]
    assert main(["evaluate", model, "--eval", str(tmp_path / "dev.jsonl")]) == 0
    captured = capsys.readouterr()
    assert "entity_f1            1.0000" in captured.out  # 0.4 with tags shifted onto neighbours
    assert "8 word(s) in 4 sentence(s)" in captured.err and "tagged O" in captured.err


# --- item 2: words past max_length ---------------------------------------------------------

def test_sentences_longer_than_max_length_are_tagged_to_their_last_word(tok):
    labels = tuple(f"B-{i}" for i in range(tok.get_vocab_size()))
    rng = np.random.default_rng(0)
    vocab = "the a cat dog sat ran on mat big small red blue house tree bird fish apple river".split()
    sentences = [tuple(rng.choice(vocab + ["unaffable", "\u00ad"], n)) for n in (3, 30, 61)]
    examples = [TokenExample(f"s{i}", w, (0,) * len(w)) for i, w in enumerate(sentences)]
    features, _ = kinds.get("tokens").featurize(examples, tok, 10, TokensOptions(stride=3))
    assert len(features) > len(examples) and features.n_truncated == 0 and features.length == 10
    decoded = kinds.get("tokens").decode({"logits": _id_logits(features, len(labels))}, features, None, labels)
    assert decoded["predictions"] == [_first_piece_tags(tok, w) for w in sentences]
    # training labels: every word's tag on its first piece in some window
    for k, words in enumerate(sentences):
        rows = np.flatnonzero(features.example_index == k)
        tagged = {int(w) for r in rows for w in features.word_index[r] if w >= 0}
        assert tagged == {i for i, w in enumerate(words) if w != "\u00ad"}


def test_evaluate_scores_every_word_of_a_long_sentence(models, tmp_path, capsys):
    model = models("tokens-bx")  # max_length 16
    words = ["the", "cat", "sat", "on", "mat"] * 12
    write_jsonl(tmp_path / "long.jsonl", [{"tokens": words, "tags": ["B-X"] * len(words)}])
    pred = predict_lib.predict_file(model, tmp_path / "long.jsonl")[0]
    assert pred["tags"] == ["B-X"] * 60  # the words past 14 pieces were "O"
    assert main(["evaluate", model, "--eval", str(tmp_path / "long.jsonl")]) == 0
    assert "entity_f1            1.0000" in capsys.readouterr().out


# --- item 3 and 20: the head decides the task ----------------------------------------------

@pytest.mark.parametrize("model,verb,task", [("classification", "evaluate", "regression"),
                                             ("regression", "evaluate", "classification"),
                                             ("regression", "predict", "classification"),
                                             ("choice", "predict", "tokens")])
def test_a_task_the_head_does_not_have_is_refused_before_the_weights_load(models, tmp_path, capsys, no_weights,
                                                                          model, verb, task):
    path = models(model)
    write_jsonl(tmp_path / "d.jsonl", [{"sentence": "the cat", "label": "fruit"}])
    argv = ["evaluate", path, "--eval", str(tmp_path / "d.jsonl")] if verb == "evaluate" else \
        ["predict", path, str(tmp_path / "d.jsonl")]
    assert main(argv + ["--task", task]) == 2
    head = "regression" if model == "regression" else model
    _one_line(capsys, verb, f"--task {task}", f"has a {head} head")


def test_evaluate_needs_no_task_when_the_model_records_it(models, tmp_path, capsys):
    model = models("classification")
    rows = [{"sentence": s, "label": y} for s, y in [("the apple", "fruit"), ("a river", "water"), ("red", "fruit")]]
    write_jsonl(tmp_path / "dev.jsonl", rows)
    preds = predict_lib.predict_file(model, tmp_path / "dev.jsonl")
    assert main(["evaluate", model, "--eval", str(tmp_path / "dev.jsonl")]) == 0
    from sklearn.metrics import accuracy_score, f1_score
    gold, got = [r["label"] for r in rows], [p["label"] for p in preds]
    out = capsys.readouterr().out
    assert f"accuracy             {accuracy_score(gold, got):.4f}" in out
    assert f"macro_f1             {f1_score(gold, got, average='macro'):.4f}" in out


# --- item 4: one reader: a choice row whose endings is a string ----------------------------

def test_choice_endings_given_as_a_string_are_refused_by_every_verb(models, src, tmp_path, capsys, no_weights):
    rows = [{"context": "the cat", "endings": ["sat", "ran"], "label": 0},
            {"context": "a dog", "endings": "sat down", "label": 1}]
    write_jsonl(tmp_path / "c.jsonl", rows)
    needle = ("c.jsonl: line 2 has endings 'sat down', not a list of endings",)
    for argv, verb in ((["predict", models("choice"), str(tmp_path / "c.jsonl")], "predict"),
                       (["evaluate", models("choice"), "--eval", str(tmp_path / "c.jsonl")], "evaluate"),
                       (["finetune", "--task", "choice", "--model", str(src), "--train", str(tmp_path / "c.jsonl"),
                         "--eval", str(tmp_path / "c.jsonl"), "--workdir", str(tmp_path / "run"),
                         "--config", "finetune-tiny"], "finetune")):
        assert main(argv) == 2
        _one_line(capsys, verb, *needle)
    assert not (tmp_path / "run").exists()


# --- item 5: duplicate SQuAD ids -----------------------------------------------------------

def _squad_doc(qas, context="the cat sat on the mat"):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}


def test_duplicate_squad_ids_are_refused_naming_them(models, tmp_path, capsys, no_weights):
    qas = [{"id": "q1" if i < 10 else f"q{i}", "question": f"what {i}", "answers": [{"text": "cat", "answer_start": 4}]}
           for i in range(12)] + [{"id": "q11", "question": "again", "answers": [{"text": "mat", "answer_start": 19}]}]
    (tmp_path / "dup.json").write_text(json.dumps(_squad_doc(qas)))
    with pytest.raises(TaskDataError, match=r"dup.json: 2 question id\(s\) given more than once: 'q1' \(10 times, "
                                            r"first at data\[0\].paragraphs\[0\].qas\[0\]\), 'q11' \(2 times"):
        read_squad(tmp_path / "dup.json")
    for argv, verb in ((["predict", models("qa"), str(tmp_path / "dup.json")], "predict"),
                       (["evaluate", models("qa"), "--eval", str(tmp_path / "dup.json")], "evaluate")):
        assert main(argv) == 2
        _one_line(capsys, verb, "'q1' (10 times")


# --- item 6: values coerced ----------------------------------------------------------------

def _jsonl_text(rows):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


COERCED = {
    "null label": ("classification", [{"sentence": "a", "label": "x"}, {"sentence": "b", "label": None}],
                   "line 2 has label null, which is not a class label"),
    "1 beside 1.0": ("classification", [{"sentence": "a", "label": 1}, {"sentence": "b", "label": 0},
                                        {"sentence": "c", "label": 1.0}],
                     "line 3 has label '1.0' beside '1' (line 1)"),
    "null text": ("classification", [{"sentence": "a", "label": "x"}, {"sentence": None, "label": "y"}],
                  "line 2 has sentence null, which is not text"),
    "list text": ("classification", [{"sentence": ["a", "b"], "label": "x"}, {"sentence": "b", "label": "y"}],
                  "line 1 has sentence [\"a\", \"b\"], which is not text"),
    "choice label 1.7": ("choice", [{"context": "c", "endings": ["a", "b"], "label": 1.7}],
                         "line 1 has label 1.7, not an ending index"),
    "choice label 0.9": ("choice", [{"context": "c", "endings": ["a", "b"], "label": 0}, {"context": "c",
                                    "endings": ["a", "b"], "label": 0.9}], "line 2 has label 0.9, not an ending index"),
    "regression nan": ("regression", [{"sentence": "a", "label": 1.0}, {"sentence": "b", "label": "nan"}],
                       "line 2 has label 'nan', which is not a finite number"),
    "regression inf": ("regression", [{"sentence": "a", "label": "inf"}], "line 1 has label 'inf', which is not"),
    "regression NaN literal": ("regression", [{"sentence": "a", "label": 2}, '{"sentence": "b", "label": NaN}'],
                               "line 2 has label nan, which is not a finite number"),
    "regression true": ("regression", [{"sentence": "a", "label": True}], "line 1 has label true, not a number"),
    "null word": ("tokens", [{"tokens": ["a", None], "tags": ["O", "O"]}], "line 1 has the word null in tokens"),
}


@pytest.mark.parametrize("case", list(COERCED))
def test_coerced_values_are_refused_with_file_line_and_value(tmp_path, case):
    kind, rows, message = COERCED[case]
    (tmp_path / "train.jsonl").write_text(_jsonl_text(rows))
    with pytest.raises(TaskDataError) as err:
        read_task(kinds.get(kind), tmp_path / "train.jsonl", {})
    assert f"train.jsonl: {message}" in str(err.value) and "\n" not in str(err.value)


def test_null_labels_in_parquet_and_in_an_eval_file_are_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist([{"sentence": "a", "label": "x"}, {"sentence": "b", "label": "y"},
                                         {"sentence": "c", "label": None}]), tmp_path / "t.parquet")
    with pytest.raises(TaskDataError, match=r"t.parquet: line 3 has label null, which is not a class label"):
        read_task(kinds.get("classification"), tmp_path / "t.parquet", {})
    write_jsonl(tmp_path / "b.jsonl", [{"sentence": "a", "label": True}, {"sentence": "b", "label": False}])
    # named as JSON spells them
    assert read_task(kinds.get("classification"), tmp_path / "b.jsonl", {})[2] == ("false", "true")
    write_jsonl(tmp_path / "ok.jsonl", [{"sentence": "a", "label": 1.5}])
    write_jsonl(tmp_path / "dev.jsonl", [{"sentence": "a", "label": 1.0}, {"sentence": "b", "label": "-inf"}])
    with pytest.raises(TaskDataError, match=r"dev.jsonl: line 2 has label '-inf', which is not a finite number"):
        read_task(kinds.get("regression"), tmp_path / "ok.jsonl", {"dev": tmp_path / "dev.jsonl"})


def test_duplicate_labels_are_refused_before_any_work(src, tmp_path, capsys):
    write_jsonl(tmp_path / "t.jsonl", [{"sentence": "a", "label": "fruit"}, {"sentence": "b", "label": "water"}])
    assert main(["finetune", "--task", "classification", "--model", str(src), "--train", str(tmp_path / "t.jsonl"),
                 "--eval", str(tmp_path / "t.jsonl"), "--labels", "fruit,water,fruit",
                 "--workdir", str(tmp_path / "run"), "--config", "finetune-tiny"]) == 2
    _one_line(capsys, "finetune", "--labels: 'fruit' is given twice")
    assert not (tmp_path / "run").exists()
    with pytest.raises(TaskDataError, match="--labels: '' is not a label name"):
        parse_task("classification", "t.jsonl", ["d.jsonl"], labels=("a", "", "b"))


def test_an_eval_label_that_is_nan_never_reaches_eval_json(models, tmp_path, capsys, no_weights):
    write_jsonl(tmp_path / "dev.jsonl", [{"sentence": "a", "label": 1.0}, {"sentence": "b", "label": "NaN"}])
    assert main(["evaluate", models("regression"), "--eval", str(tmp_path / "dev.jsonl")]) == 2
    _one_line(capsys, "evaluate", "dev.jsonl: line 2 has label 'NaN', which is not a finite number")


# --- item 17: tracebacks -------------------------------------------------------------------

SQUAD_TYPES = {
    "article as a string": ({"data": ["the cat"]}, "data[0] is 'the cat', not an article object"),
    "paragraph as a string": ({"data": [{"title": "t", "paragraphs": ["the cat sat"]}]},
                              "data[0].paragraphs[0] is 'the cat sat', not a paragraph object"),
    "paragraphs as a string": ({"data": [{"title": "t", "paragraphs": "the cat sat"}]},
                               "data[0].paragraphs is 'the cat sat', not a list of paragraphs"),
    "answers as a string": (_squad_doc([{"id": "a1", "question": "who", "answers": "cat"}]),
                            "data[0].paragraphs[0].qas[0].answers (question 'a1') is 'cat', not a list of answers"),
    "a null question": (_squad_doc([{"id": "n1", "question": None, "answers": []}]),
                        "data[0].paragraphs[0].qas[0].question (question 'n1') is null, not text"),
    "a numeric question": (_squad_doc([{"id": "n2", "question": 42, "answers": []}]),
                           "qas[0].question (question 'n2') is 42, not text"),
    "an answer as a string": (_squad_doc([{"id": "s1", "question": "who", "answers": ["cat"]}]),
                              "qas[0].answers[0] (question 's1') is 'cat', not an answer object"),
}


@pytest.mark.parametrize("case", list(SQUAD_TYPES))
def test_squad_json_with_wrong_types_is_one_line_naming_the_place(models, tmp_path, capsys, no_weights, case):
    doc, message = SQUAD_TYPES[case]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(TaskDataError) as err:
        read_squad(tmp_path / "bad.json")
    assert "bad.json: data[0]" in str(err.value) and message in str(err.value)
    assert main(["predict", models("qa"), str(tmp_path / "bad.json")]) == 2
    _one_line(capsys, "predict", message)


def test_predict_on_a_choice_file_whose_label_is_a_letter(models, tmp_path, capsys, no_weights):
    write_jsonl(tmp_path / "c.jsonl", [{"context": "the cat", "endings": ["sat", "ran"], "label": 0},
                                       {"context": "a dog", "endings": ["sat", "ran"], "label": "b"}])
    assert main(["predict", models("choice"), str(tmp_path / "c.jsonl")]) == 2
    _one_line(capsys, "predict", "c.jsonl: line 2 has label 'b', not an ending index (0 .. 1)")
    # an unlabelled row (no label, null, or the datasets' -1) is fine to predict on
    write_jsonl(tmp_path / "u.jsonl", [{"context": "the cat", "endings": ["sat", "ran"], "label": -1},
                                       {"context": "a dog", "endings": ["sat", "ran"], "label": None},
                                       {"context": "a dog", "endings": ["sat", "ran"]}])
    assert len(predict_lib.read_examples(predict_lib.load_finetuned(models("choice"), weights=False),
                                         tmp_path / "u.jsonl", labelled=False)) == 3


@pytest.mark.parametrize("what", ["vocab without [UNK]", "a text file"])
def test_a_tokenizer_that_is_not_one_is_refused_before_any_work(models, src, tmp_path, capsys, no_weights, what):
    if what == "a text file":
        bad = tmp_path / "notes.txt"
        bad.write_text("These are my notes.\nNothing here is a vocabulary.\n")
        needle = "notes.txt: line 1 holds 'These are my notes.', which is not one token"
    else:
        bad = tmp_path / "vocab.txt"
        bad.write_text("".join(t + "\n" for t in ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]))
        needle = "vocab.txt has no unknown token '[UNK]'"
    write_jsonl(tmp_path / "d.jsonl", [{"sentence": "the zebra", "label": "fruit"}, {"sentence": "a", "label": "water"}])
    assert main(["predict", models("classification"), str(tmp_path / "d.jsonl"), "--tokenizer", str(bad)]) == 2
    _one_line(capsys, "predict", needle)
    assert main(["finetune", "--task", "classification", "--model", str(src), "--train", str(tmp_path / "d.jsonl"),
                 "--eval", str(tmp_path / "d.jsonl"), "--tokenizer", str(bad), "--workdir", str(tmp_path / "run"),
                 "--config", "finetune-tiny"]) == 2
    _one_line(capsys, "finetune", needle)
    assert not (tmp_path / "run").exists()


# --- item 18: refused early, named right ---------------------------------------------------

def test_unanswerable_questions_in_a_v1_eval_set_are_refused_when_read(models, src, tmp_path, capsys):
    answered = [{"id": "a", "question": "who", "answers": [{"text": "cat", "answer_start": 4}]}]
    (tmp_path / "train.json").write_text(json.dumps(_squad_doc(answered)))
    (tmp_path / "dev.json").write_text(json.dumps(_squad_doc(answered + [
        {"id": "u1", "question": "why", "answers": [], "is_impossible": True},
        {"id": "u2", "question": "when", "answers": []}])))
    spec = TaskSpec("qa", str(tmp_path / "train.json"), {"dev": str(tmp_path / "dev.json")})
    with pytest.raises(TaskDataError, match=r"dev.json: 2 question\(s\) without an answer \('u1', 'u2'\)"):
        read_task_data(spec)
    assert len(read_task_data(spec, QAOptions(version_2=True)).evals["dev"]) == 3
    assert main(["finetune", "--task", "qa", "--model", str(src), "--train", str(tmp_path / "train.json"),
                 "--eval", str(tmp_path / "dev.json"), "--workdir", str(tmp_path / "run"),
                 "--config", "finetune-tiny"]) == 2
    _one_line(capsys, "finetune", "dev.json: 2 question(s) without an answer", "kinds.qa.version_2=true")
    assert not (tmp_path / "run").exists()
    assert main(["evaluate", models("qa"), "--eval", str(tmp_path / "dev.json")]) == 2  # a v1.1 model
    _one_line(capsys, "evaluate", "dev.json: 2 question(s) without an answer")


def test_a_bom_before_docstart_is_not_a_sentence(models, tmp_path):
    text = "\ufeff-DOCSTART- -X- -X- O\n\nthe O\ncat B-X\n\nsat O\n"
    (tmp_path / "train.txt").write_text(text, encoding="utf-8")
    examples, labels = read_tokens(tmp_path / "train.txt")
    assert labels == ("B-X", "O") and [e.words for e in examples] == [("the", "cat"), ("sat",)]
    assert [e.id for e in examples] == ["train.txt:3", "train.txt:6"]
    preds = predict_lib.predict_file(models("tokens"), tmp_path / "train.txt")
    assert [p["words"] for p in preds] == [["the", "cat"], ["sat"]]


def test_a_one_ending_choice_set_is_refused(tmp_path):
    write_jsonl(tmp_path / "one.jsonl", [{"context": "c", "endings": ["only"], "label": 0}])
    with pytest.raises(TaskDataError, match=r"one.jsonl: line 1 has 1 ending\(s\); a choice needs at least 2"):
        read_choice(tmp_path / "one.jsonl")
    (tmp_path / "one.csv").write_text("sent1,sent2,ending0,label\nA man,He,sits,0\n")
    with pytest.raises(TaskDataError, match=r"one.csv: line 2 has 1 ending\(s\)"):
        read_choice(tmp_path / "one.csv")


def test_evaluate_eval_dir_and_a_missing_model_are_named_for_what_they_are(models, src, tmp_path, capsys):
    (tmp_path / "dev").mkdir()
    assert main(["evaluate", models("classification"), "--eval", str(tmp_path / "dev")]) == 2
    _one_line(capsys, "evaluate", f"{tmp_path / 'dev'} is a folder, not a data file")
    write_jsonl(tmp_path / "d.jsonl", [{"sentence": "a", "label": "x"}, {"sentence": "b", "label": "y"}])
    for argv, verb in ((["evaluate", str(tmp_path / "nomodel"), "--eval", str(tmp_path / "d.jsonl")], "evaluate"),
                       (["predict", str(tmp_path / "nomodel"), str(tmp_path / "d.jsonl")], "predict"),
                       (["finetune", "--task", "classification", "--model", str(tmp_path / "nomodel"), "--train",
                         str(tmp_path / "d.jsonl"), "--eval", str(tmp_path / "d.jsonl"), "--workdir",
                         str(tmp_path / "run"), "--config", "finetune-tiny"], "finetune")):
        assert main(argv) == 2
        line = _one_line(capsys, verb, "nomodel", "not found")
        assert "tokenizer" not in line
    assert not (tmp_path / "run").exists()


# --- item 20: predict rows carry their inputs; GLUE names; headerless CoLA and SWAG CSV ------

def test_predict_rows_carry_their_input_columns(models, tmp_path):
    write_jsonl(tmp_path / "p.jsonl", [{"premise": "the cat", "hypothesis": "a dog", "label": "yes"}])
    row = predict_lib.predict_file(models("pair"), tmp_path / "p.jsonl")[0]
    assert list(row)[:3] == ["id", "premise", "hypothesis"] and (row["premise"], row["hypothesis"]) == ("the cat",
                                                                                                       "a dog")
    assert row["label"] in ("no", "yes")
    (tmp_path / "q.json").write_text(json.dumps(_squad_doc([{"id": "q", "question": "who sat", "answers": []}])))
    row = predict_lib.predict_file(models("qa"), tmp_path / "q.json")[0]
    assert (row["question"], row["context"]) == ("who sat", "the cat sat on the mat") and isinstance(row["answer"], str)
    write_jsonl(tmp_path / "c.jsonl", [{"context": "the cat", "endings": ["sat", "ran"]}])
    row = predict_lib.predict_file(models("choice"), tmp_path / "c.jsonl")[0]
    assert row["context"] == "the cat" and row["endings"] == ["sat", "ran"] and row["label"] in (0, 1)


def test_glue_classes_carry_their_names(tmp_path):
    names = {"cola": ("unacceptable", "acceptable"), "sst2": ("negative", "positive"),
             "mrpc": ("not_equivalent", "equivalent"), "qqp": ("not_duplicate", "duplicate"),
             "wnli": ("not_entailment", "entailment")}
    for task, want in names.items():
        assert GLUE_TASKS[task].labels == want and GLUE_TASKS[task].values == ("0", "1")
    folder = tmp_path / "SST-2"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\nfine\t1\n")
    train, evals, labels = load_glue("sst2", tmp_path)
    assert labels == ("negative", "positive") and [e.label for e in train] == [1, 0] and evals["dev"][0].label == 1


def test_predict_and_evaluate_read_headerless_cola_as_finetune_does(models, tmp_path, capsys):
    model = models("cola")
    rows = [("gj04", 1, "", "the cat sat on the mat"), ("gj04", 0, "*", "cat the mat on sat"),
            ("gj04", 1, "", "a dog ran"), ("gj04", 0, "*", "ran dog a the")]
    (tmp_path / "dev.tsv").write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    preds = predict_lib.predict_file(model, tmp_path / "dev.tsv")
    assert [p["sentence"] for p in preds] == [r[3] for r in rows]
    assert [p["id"] for p in preds] == [f"dev.tsv:{i}" for i in range(1, 5)]  # no row taken as a header
    assert all(p["label"] in ("unacceptable", "acceptable") for p in preds)
    assert main(["evaluate", model, "--eval", str(tmp_path / "dev.tsv")]) == 0
    from sklearn.metrics import matthews_corrcoef
    gold = [("unacceptable", "acceptable")[r[1]] for r in rows]
    out = capsys.readouterr().out  # scored as GLUE scores CoLA: Matthews correlation
    assert out.split() == ["mcc", f"{matthews_corrcoef(gold, [p['label'] for p in preds]):.4f}"]
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\tthe cat sat\n1\ta dog\n")  # CoLA's test file is headed
    assert [p["sentence"] for p in predict_lib.predict_file(model, tmp_path / "test.tsv")] == ["the cat sat", "a dog"]


def test_predict_and_evaluate_read_swag_csv_as_finetune_does(models, tmp_path, capsys):
    model = models("choice")
    header = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,label\n"
    body = ['v,1,x,The cat sat.,It,gold,"ran, fast",sat,slept,2\n', "v,2,x,A dog ran.,It,gold,barked,sat,ran,0\n",
            "v,3,x,A bird sang.,It,gold,flew,sang,fell,1\n"]
    (tmp_path / "val.csv").write_text(header + "".join(body))
    preds = predict_lib.predict_file(model, tmp_path / "val.csv")
    assert preds[0]["context"] == "The cat sat." and preds[0]["endings"] == ["It ran, fast", "It sat", "It slept"]
    assert main(["evaluate", model, "--eval", str(tmp_path / "val.csv")]) == 0
    from sklearn.metrics import accuracy_score
    expected = accuracy_score([2, 0, 1], [p["label"] for p in preds])
    assert f"accuracy             {expected:.4f}" in capsys.readouterr().out
    examples, _ = kinds.get("choice").read(tmp_path / "val.csv")
    assert [e.label for e in examples] == [2, 0, 1]


def test_predict_out_in_a_missing_folder_is_refused_before_any_work(models, tmp_path, capsys, no_weights):
    write_jsonl(tmp_path / "d.jsonl", [{"sentence": "the cat"}])
    assert main(["predict", models("classification"), str(tmp_path / "d.jsonl"), "--out",
                 str(tmp_path / "nodir" / "x.jsonl")]) == 2
    _one_line(capsys, "predict", f"--out {tmp_path / 'nodir' / 'x.jsonl'}: its folder {tmp_path / 'nodir'} does not exist")
