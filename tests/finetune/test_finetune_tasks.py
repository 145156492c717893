"""Reading fine-tuning examples: GLUE presets over a made GLUE_DIR, every task kind, every bad input."""

from __future__ import annotations

import json

import pytest

from jaxbert.errors import InputError
from jaxbert.finetune.glue import GLUE_TASKS, glue_task, load_glue
from jaxbert.finetune import kinds
from jaxbert.finetune.kinds.choice import ChoiceExample, read_choice
from jaxbert.finetune.kinds.qa.squad import gold_answers, read_squad
from jaxbert.finetune.kinds.tokens.reader import read_tokens
from jaxbert.finetune.readers import TextExample, label_list, read_task, read_text
from jaxbert.finetune.row_files import TaskDataError, read_rows

T = "\t"
MNLI_TRAIN = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"]
MNLI_DEV = MNLI_TRAIN[:11] + ["label2", "label3", "label4", "label5", "gold_label"]


def _tsv(path, header, rows, bom=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([T.join(header)] if header else []) + [T.join(map(str, r)) for r in rows]
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")


def _glue_dir(root):
    """A GLUE_DIR with two or three rows per file, laid out and headed as GLUE's own files are."""
    _tsv(root / "CoLA/train.tsv", None, [["gj04", 1, "", "Our friends won't buy this analysis."],
                                         ["gj04", 0, "*", "They drank the pub."]])
    _tsv(root / "CoLA/dev.tsv", None, [["gj04", 1, "", "He said \"hi."]])  # a lone quote is text
    _tsv(root / "SST-2/train.tsv", ["sentence", "label"], [["it 's a charming journey . ", 1], ["dull", 0]])
    _tsv(root / "SST-2/dev.tsv", ["sentence", "label"], [["\"fine\" film", 1]])
    mrpc = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    _tsv(root / "MRPC/train.tsv", mrpc, [[1, 702876, 702977, "Amrozi accused his brother .", "Referring to him ."],
                                         [0, 2108705, 2108831, "Yucaipa owned Dominick 's .", "Yucaipa bought it ."]],
         bom=True)
    _tsv(root / "MRPC/dev.tsv", mrpc, [[1, 1, 2, "a", "b"]])
    qqp = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    _tsv(root / "QQP/train.tsv", qqp, [[1, 1, 2, "How?", "Why?", 0], [2, 3, 4, "What?", "What", 1]])
    _tsv(root / "QQP/dev.tsv", qqp, [[3, 5, 6, "Who?", "whom?", 1]])
    sts = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2", "score"]
    _tsv(root / "STS-B/train.tsv", sts, [[0, "main-captions", "MSRvid", "2012test", 1, "none", "none",
                                          "A plane is taking off.", "An air plane is taking off.", "5.000"]])
    _tsv(root / "STS-B/dev.tsv", sts, [[0, "main-captions", "MSRvid", "2012test", 1, "none", "none", "a", "b", "1.75"]])
    mnli_row = [0, 31193, "31193n", "government", "( ( x ) )", "( y )", "(ROOT x)", "(ROOT y)",
                "Conceptually cream skimming has two basic dimensions.", "Product and geography are what make it work."]
    _tsv(root / "MNLI/train.tsv", MNLI_TRAIN, [mnli_row + ["neutral", "neutral"],
                                               mnli_row + ["entailment", "entailment"]])
    _tsv(root / "MNLI/dev_matched.tsv", MNLI_DEV, [mnli_row + ["neutral"] * 5 + ["neutral"]])
    _tsv(root / "MNLI/dev_mismatched.tsv", MNLI_DEV, [mnli_row + ["contradiction"] * 5 + ["contradiction"],
                                                      mnli_row + ["entailment"] * 5 + ["entailment"]])
    for folder, first, labels in (("QNLI", "question", ("entailment", "not_entailment")),
                                  ("RTE", "sentence1", ("not_entailment", "entailment")),
                                  ("WNLI", "sentence1", (1, 0))):
        header = ["index", first, "sentence" if folder == "QNLI" else "sentence2", "label"]
        _tsv(root / folder / "train.tsv", header, [[0, "p", "h", labels[0]], [1, "p2", "h2", labels[1]]])
        _tsv(root / folder / "dev.tsv", header, [[0, "q", "r", labels[0]]])
    return root


@pytest.fixture
def glue_dir(tmp_path):
    return _glue_dir(tmp_path / "glue_data")


@pytest.mark.parametrize("name", sorted(GLUE_TASKS))
def test_every_glue_preset_reads_its_folder(glue_dir, name):
    train, evals, labels = load_glue(name, glue_dir)
    task = GLUE_TASKS[name]
    assert set(evals) == set(task.evals) and labels == task.labels
    assert all(isinstance(e, TextExample) for e in train)
    assert (train[0].text_b is None) == (len(task.text_columns) == 1)
    assert task.main_metric[1] in task.metrics and task.main_metric[0] in task.evals
    if task.kind == "regression":
        assert train[0].label == 5.0 and evals["dev"][0].label == 1.75
    else:
        assert all(0 <= e.label < len(labels) for es in [train, *evals.values()] for e in es)


def test_glue_values_land_in_the_right_fields(glue_dir):
    train, evals, _ = load_glue("CoLA", glue_dir)
    assert [e.label for e in train] == [1, 0] and train[1].text_a == "They drank the pub."
    assert evals["dev"][0].text_a == 'He said "hi.'
    train, _, _ = load_glue("mrpc", glue_dir / "MRPC")  # the task folder itself works too
    assert train[0].text_a == "Amrozi accused his brother ." and train[0].text_b == "Referring to him ." and \
        train[0].label == 1
    _, evals, labels = load_glue("mnli", glue_dir)
    assert [labels[e.label] for e in evals["mismatched"]] == ["contradiction", "entailment"]
    assert evals["matched"][0].text_b == "Product and geography are what make it work."
    assert glue_task("STS-B").name == "stsb" and glue_task("sst-2").folder == "SST-2"


def test_glue_errors_name_the_task_folder_and_bad_label(glue_dir):
    with pytest.raises(TaskDataError, match="unknown GLUE task 'squad'"):
        glue_task("squad")
    with pytest.raises(TaskDataError, match="nor a CoLA/ folder"):
        load_glue("cola", glue_dir / "nowhere")
    _tsv(glue_dir / "RTE/dev.tsv", ["index", "sentence1", "sentence2", "label"], [[0, "a", "b", "contradiction"]])
    with pytest.raises(TaskDataError, match=r"RTE/dev.tsv: line 2 has label 'contradiction', which is not among"):
        load_glue("rte", glue_dir)


def test_label_sets_come_sorted_from_the_training_file(tmp_path):
    _tsv(tmp_path / "train.tsv", ["text", "y"], [["a", "pos"], ["b", "neg"], ["c", "neu"], ["d", "neg"]])
    _tsv(tmp_path / "dev.tsv", ["text", "y"], [["e", "neu"]])
    train, evals, labels = read_task(kinds.get("classification"), tmp_path / "train.tsv", {"dev": tmp_path / "dev.tsv"},
                                     text_columns=["text"], label_column="y")
    assert labels == ("neg", "neu", "pos") and [e.label for e in train] == [2, 0, 1, 0]
    assert evals["dev"][0].label == 1
    assert label_list([10, 2, 1]) == ("1", "2", "10") and label_list(["b", "a"]) == ("a", "b")
    _tsv(tmp_path / "bad.tsv", ["text", "y"], [["e", "neu"], ["f", "angry"]])
    with pytest.raises(TaskDataError, match=r"bad.tsv: line 3 has y 'angry', which is not among the training labels"):
        read_task(kinds.get("classification"), tmp_path / "train.tsv", {"dev": tmp_path / "bad.tsv"},
                  text_columns=["text"], label_column="y")


def test_jsonl_csv_and_parquet_read_alike(tmp_path):
    rows = [{"premise": "p1", "hypothesis": "h1", "label": 1}, {"premise": "p, 2", "hypothesis": "h2", "label": 0}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "d.csv").write_text('premise,hypothesis,label\np1,h1,1\n"p, 2",h2,0\n')
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    got = [read_text(tmp_path / f"d.{ext}", ["premise", "hypothesis"], "label")
           for ext in ("jsonl", "csv", "parquet")]
    for examples, labels in got:
        assert labels == ("0", "1")
        assert [(e.text_a, e.text_b, e.label) for e in examples] == [("p1", "h1", 1), ("p, 2", "h2", 0)]
    examples, labels = read_text(tmp_path / "d.jsonl", ["premise"], "label", numeric=True)
    assert labels is None and [e.label for e in examples] == [1.0, 0.0]


@pytest.mark.parametrize("content, message", [
    ("", r"x.tsv is empty"),
    ("a\tb\n", r"x.tsv has a header row but no data rows"),
    ("a\tb\n1\t2\n3\n", r"x.tsv: line 3 has 1 fields where the header has 2"),
    ("a\tb\n1\t2\n", r"x.tsv has no column 'label'; its columns: a, b"),
])
def test_bad_tables_raise_one_line_naming_the_file(tmp_path, content, message):
    (tmp_path / "x.tsv").write_text(content)
    with pytest.raises(TaskDataError, match=message) as err:
        read_text(tmp_path / "x.tsv", ["a"], "label")
    assert "\n" not in str(err.value) and isinstance(err.value, InputError)


def test_unknown_extension_missing_file_bad_number(tmp_path):
    (tmp_path / "x.xlsx").write_text("a")
    with pytest.raises(TaskDataError, match=r"x.xlsx: unknown file extension '.xlsx'"):
        read_rows(tmp_path / "x.xlsx")
    with pytest.raises(TaskDataError, match="data file not found"):
        read_rows(tmp_path / "none.tsv")
    _tsv(tmp_path / "r.tsv", ["s", "score"], [["a", "1.5"], ["b", "high"]])
    with pytest.raises(TaskDataError, match=r"r.tsv: line 3 has score 'high', not a number"):
        read_text(tmp_path / "r.tsv", ["s"], "score", numeric=True)
    with pytest.raises(TaskDataError, match="unknown task kind 'ranking'"):
        kinds.get("ranking")


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
"""


def test_conll_and_jsonl_token_files(tmp_path):
    (tmp_path / "train.txt").write_text(CONLL)
    examples, labels = read_tokens(tmp_path / "train.txt")
    assert labels == ("B-MISC", "B-ORG", "I-PER", "O")
    assert [e.words for e in examples] == [("EU", "rejects", "German"), ("Peter", "Blackburn")]
    assert [[labels[t] for t in e.tags] for e in examples] == [["B-ORG", "O", "B-MISC"], ["I-PER", "I-PER"]]
    (tmp_path / "dev.jsonl").write_text(json.dumps({"tokens": ["Paris", "is"], "tags": ["B-MISC", "O"]}) + "\n")
    dev, _ = read_tokens(tmp_path / "dev.jsonl", labels)
    assert dev[0].words == ("Paris", "is") and dev[0].tags == (0, 3)


@pytest.mark.parametrize("content, message", [
    ("EU B-ORG\nrejects X-VERB\n", r"bad.txt: line 2 has tag 'X-VERB', which is not IOB"),
    ("EU B-ORG\nrejects\n", r"bad.txt: line 2 has a token without a tag"),
    ("\n\n", r"bad.txt is empty"),
])
def test_bad_token_files(tmp_path, content, message):
    (tmp_path / "bad.txt").write_text(content)
    with pytest.raises(TaskDataError, match=message):
        read_tokens(tmp_path / "bad.txt")
    (tmp_path / "t.doc").write_text("x O\n")
    with pytest.raises(TaskDataError, match=r"t.doc: unknown file extension '.doc'"):
        read_tokens(tmp_path / "t.doc")


def _squad(path, answers_ok=True, v2=False):
    context = "The Broncos beat the Panthers in Santa Clara."
    qas = [{"id": "q1", "question": "Who won?", "answers": [{"text": "The Broncos", "answer_start": 0}]},
           {"id": "q2", "question": "Where?",
            "answers": [{"text": "Santa Clara", "answer_start": 33 if answers_ok else 30}]},
           {"id": "q3", "question": "Who lost?", "answers": [{"text": "Panthers", "answer_start": 21 if answers_ok else 3}]}]
    if v2:
        qas.append({"id": "q4", "question": "When?", "answers": [], "is_impossible": True,
                    "plausible_answers": [{"text": "beat", "answer_start": 12}]})
    path.write_text(json.dumps({"version": "v2.0" if v2 else "1.1",
                                "data": [{"title": "SB50", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def test_squad_v1_and_v2(tmp_path):
    examples = read_squad(_squad(tmp_path / "v1.json"))
    assert [e.id for e in examples] == ["q1", "q2", "q3"] and examples[1].answers == (("Santa Clara", 33),)
    v2 = read_squad(_squad(tmp_path / "v2.json", v2=True))
    assert v2[3].is_impossible and not v2[0].is_impossible
    assert gold_answers(v2) == {"q1": ["The Broncos"], "q2": ["Santa Clara"], "q3": ["Panthers"], "q4": []}


def test_squad_offsets_that_miss_are_counted_and_the_first_named(tmp_path):
    with pytest.raises(TaskDataError, match=r"bad.json: 2 answer\(s\) do not match the context at "
                                            r"answer_start; the first is in question 'q2'"):
        read_squad(_squad(tmp_path / "bad.json", answers_ok=False))
    (tmp_path / "e.json").write_text("")
    with pytest.raises(TaskDataError, match="e.json is empty"):
        read_squad(tmp_path / "e.json")
    (tmp_path / "l.json").write_text("[1, 2]")
    with pytest.raises(TaskDataError, match="no top-level 'data' list"):
        read_squad(tmp_path / "l.json")


def test_choice_swag_csv_and_jsonl(tmp_path):
    (tmp_path / "swag.csv").write_text(
        "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
        'lsmdc,1,"Students lower. The",Students lower their eyes.,The,gold,"smiles, fine",nods,runs,sits,2\n')
    examples, labels = read_choice(tmp_path / "swag.csv")
    assert labels is None and examples[0] == ChoiceExample(
        "swag.csv:2", "Students lower their eyes.", ("The smiles, fine", "The nods", "The runs", "The sits"), 2)
    rows = [{"context": "c", "endings": ["a", "b", "c"], "label": 1}, {"context": "d", "endings": ["x", "y"], "label": 0}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(TaskDataError, match=r"c.jsonl: line 2 has 2 endings where 3 are expected"):
        read_choice(tmp_path / "c.jsonl")
    (tmp_path / "c.jsonl").write_text(json.dumps({"context": "c", "endings": ["a", "b"], "label": 4}))
    with pytest.raises(TaskDataError, match=r"line 1 has label 4 for 2 endings"):
        read_choice(tmp_path / "c.jsonl")
