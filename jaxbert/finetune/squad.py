"""SQuAD v1.1 / v2.0 JSON files as question-answering examples.

The file is {"data": [{"paragraphs": [{"context": str, "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible" (v2.0)}]}]}]}. Every answer's text must sit in the
context at its answer_start; a file where any does not is refused, naming how many and the first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from jaxbert.finetune.tables import TaskDataError, local_path


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
    p = local_path(path)
    if p.suffix.lower() != ".json":
        raise TaskDataError(f"{path}: unknown file extension {p.suffix or '(none)'!r} for SQuAD data; expected .json")
    try:
        text = p.read_text(encoding="utf-8")
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


def read_squad(path) -> list[QAExample]:
    """Every question of a SQuAD v1.1 or v2.0 file, in file order."""
    examples, bad, first_bad = [], 0, None
    for article in _load(path):
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise TaskDataError(f"{path}: a paragraph of {article.get('title', 'an article')!r} has no context")
            for qa in paragraph.get("qas", []):
                qid = str(qa.get("id", f"{len(examples)}"))
                if "question" not in qa:
                    raise TaskDataError(f"{path}: question {qid!r} has no 'question' text")
                answers = []
                for a in ([] if qa.get("is_impossible", False) else qa.get("answers", [])):
                    text, start = a.get("text"), a.get("answer_start")
                    if not isinstance(text, str) or not isinstance(start, int):
                        raise TaskDataError(f"{path}: question {qid!r} has an answer without text / answer_start")
                    if context[start:start + len(text)] != text:
                        bad += 1
                        first_bad = first_bad or qid
                    answers.append((text, start))
                examples.append(QAExample(qid, qa["question"], context, tuple(answers)))
    if bad:
        raise TaskDataError(f"{path}: {bad} answer(s) do not match the context at answer_start; "
                            f"the first is in question {first_bad!r}")
    if not examples:
        raise TaskDataError(f"{path} holds no questions")
    return examples


def gold_answers(examples: list[QAExample]) -> dict[str, list[str]]:
    """Question id -> gold answer texts ([] when unanswerable), as metrics.squad_scores takes them."""
    return {e.id: [text for text, _ in e.answers] for e in examples}
