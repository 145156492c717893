"""SQuAD v1.1 / v2.0 JSON files as question-answering examples.

The file is {"data": [{"paragraphs": [{"context": str, "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible" (v2.0)}]}]}]}. Every answer's text must sit in the
context at its answer_start; a file where any does not is refused, naming how many and the first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from jaxbert.finetune.row_files import TaskDataError, data_file, show


@dataclass(frozen=True)
class QAExample:
    """A question about a context; answers are (text, character start) pairs, empty when unanswerable."""

    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]

    @property
    def is_impossible(self) -> bool:
        return not self.answers


def _load(path) -> list:
    p = data_file(path)
    if p.suffix.lower() != ".json":
        raise TaskDataError(f"{path}: unknown file extension {p.suffix or '(none)'!r} for SQuAD data; expected .json")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise TaskDataError(f"cannot read {path}: {e.strerror or e}") from e
    if not text.strip():
        raise TaskDataError(f"{path} is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path} is not JSON: {e.msg} at line {e.lineno}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise TaskDataError(f"{path} has no top-level 'data' list (SQuAD layout: data/paragraphs/qas)")
    return doc["data"]


def _need(path, where: str, value, kind: type, what: str, qid: str | None = None):
    """value if it is a `kind`, else an error naming the file, the place in the document and the value."""
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    of = f" (question {qid!r})" if qid is not None else ""
    raise TaskDataError(f"{path}: {where}{of} is {show(value)}, not {what}")


def read_squad(path) -> list[QAExample]:
    """Every question of a SQuAD v1.1 or v2.0 file, in file order.

    Every level must have SQuAD's types (an article and a paragraph are objects, qas and answers
    lists, a question and a context text, answer_start a whole number); a place that does not is
    named by its path in the document (data[0].paragraphs[2].qas[1].answers). Question ids must
    be distinct: those given more than once are named.
    """
    examples, bad, first_bad, where_id = [], 0, None, {}
    repeated: dict[str, int] = {}
    for i, article in enumerate(_load(path)):
        at = f"data[{i}]"
        _need(path, at, article, dict, "an article object with 'paragraphs'")
        for j, paragraph in enumerate(_need(path, f"{at}.paragraphs", article.get("paragraphs", []), list,
                                            "a list of paragraphs")):
            pat = f"{at}.paragraphs[{j}]"
            _need(path, pat, paragraph, dict, "a paragraph object with 'context' and 'qas'")
            if not isinstance(paragraph.get("context"), str):
                raise TaskDataError(f"{path}: {pat}.context is {show(paragraph.get('context'))}, not text "
                                    f"(a paragraph of {article.get('title', 'an article')!r})")
            context = paragraph["context"]
            for k, qa in enumerate(_need(path, f"{pat}.qas", paragraph.get("qas", []), list, "a list of questions")):
                qat = f"{pat}.qas[{k}]"
                _need(path, qat, qa, dict, "a question object")
                raw_id = qa.get("id", f"{len(examples)}")
                qid = str(_need(path, f"{qat}.id", raw_id, (str, int), "a question id"))
                if "question" not in qa:
                    raise TaskDataError(f"{path}: question {qid!r} has no 'question' text")
                question = _need(path, f"{qat}.question", qa["question"], str, "text", qid)
                if qid in where_id:
                    repeated[qid] = repeated.get(qid, 1) + 1
                else:
                    where_id[qid] = qat
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise TaskDataError(f"{path}: {qat}.is_impossible (question {qid!r}) is {show(impossible)}, "
                                        f"not true or false")
                answers = []
                listed = _need(path, f"{qat}.answers", qa.get("answers", []), list, "a list of answers", qid)
                for m, a in enumerate([] if impossible else listed):
                    aat = f"{qat}.answers[{m}]"
                    _need(path, aat, a, dict, "an answer object with 'text' and 'answer_start'", qid)
                    text, start = a.get("text"), a.get("answer_start")
                    if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
                        raise TaskDataError(f"{path}: question {qid!r} has an answer without text / answer_start "
                                            f"({aat}: text {show(text)}, answer_start {show(start)})")
                    if context[start:start + len(text)] != text:
                        bad += 1
                        first_bad = first_bad or qid
                    answers.append((text, start))
                examples.append(QAExample(qid, question, context, tuple(answers)))
    if repeated:
        shown = ", ".join(f"{q!r} ({n} times, first at {where_id[q]})" for q, n in list(repeated.items())[:5])
        more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
        raise TaskDataError(f"{path}: {len(repeated)} question id(s) given more than once: {shown}{more}; "
                            f"every question needs its own id")
    if bad:
        raise TaskDataError(f"{path}: {bad} answer(s) do not match the context at answer_start; "
                            f"the first is in question {first_bad!r}")
    if not examples:
        raise TaskDataError(f"{path} holds no questions")
    return examples


def check_answered(path, examples: list[QAExample]) -> None:
    """SQuAD v1.1 scoring needs an answer to every question: refuse the unanswerable, naming them."""
    none = [e.id for e in examples if not e.answers]
    if none:
        shown = ", ".join(repr(q) for q in none[:5]) + (f" and {len(none) - 5} more" if len(none) > 5 else "")
        raise TaskDataError(f"{path}: {len(none)} question(s) without an answer ({shown}), which SQuAD v1.1 "
                            f"scoring cannot score; for SQuAD v2.0 data --set kinds.qa.version_2=true")


def gold_answers(examples: list[QAExample]) -> dict[str, list[str]]:
    """Question id -> gold answer texts ([] when unanswerable), as metrics.squad_scores takes them."""
    return {e.id: [text for text, _ in e.answers] for e in examples}
