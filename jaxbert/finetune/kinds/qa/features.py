"""Extractive QA: questions over long contexts as overlapping token windows, and back to answer text.

A window is [CLS] question [SEP] context piece [SEP] (token_type 1 from the context on). A
context longer than fits is cut into pieces of max_length - len(question) - 3 tokens, each
starting `stride` tokens before the previous one ended, so an answer near a cut sits whole in
some window. Training targets start_positions / end_positions [W] point at the answer's first
and last token in the window, or both at 0 ([CLS]) when the question has no answer or the
answer is not wholly inside the window. `QAWindows` keeps, per window, the example it came
from and each token's character span in the context, which `postprocess_qa` uses to turn
start / end logits back into answer text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer

from jaxbert.finetune.features import Features, bucket_for, bucket_lengths, pad_rows, pieces, special_id
from jaxbert.finetune.kinds.qa.squad import QAExample
from jaxbert.finetune.row_files import TaskDataError


@dataclass
class QAWindows:
    """What maps windows back to text: example_index [W] int32, offsets [W, L, 2] int32.

    offsets[w, t] is the (start, end) character span in the example's context of token t of
    window w, or (-1, -1) for question, special and padding tokens.
    """

    example_index: np.ndarray
    offsets: np.ndarray
    examples: list[QAExample]


def _answer_tokens(example: QAExample, offsets, a: int, b: int) -> tuple[int, int] | None:
    """The answer's first / last context token within tokens [a, b), or None if not wholly inside."""
    if not example.answers or a >= b:
        return None
    text, s = example.answers[0]
    e = s + len(text)
    if not text or offsets[a][0] > s or offsets[b - 1][1] < e:
        return None
    first = next((i for i in range(a, b) if offsets[i][1] > s), None)
    last = next((i for i in range(b - 1, a - 1, -1) if offsets[i][0] < e), None)
    # an answer made only of characters no token covers (spaces) has no tokens
    return None if first is None or last is None or first > last else (first, last)


def _trimmed(context: str, offsets) -> list[tuple[int, int]]:
    """Token spans without the whitespace they start with: a byte-level BPE's token for " London"
    spans the space, which an answer cut from the context must not carry."""
    out = []
    for s, e in offsets:
        while s < e and context[s].isspace():
            s += 1
        out.append((s, e))
    return out


def qa_features(examples: Sequence[QAExample], tok: Tokenizer, max_length: int = 384, stride: int = 128,
                max_query_length: int = 64) -> tuple[Features, QAWindows]:
    """Windows of every question: input_ids / token_type_ids / attention_mask [W, L],
    start_positions / end_positions [W] int32, and the QAWindows that map them back.

    Features.n_truncated counts questions cut to max_query_length tokens.
    """
    if not examples:
        raise TaskDataError("no QA examples to encode")
    cls, sep, pad = special_id(tok, "cls"), special_id(tok, "sep"), special_id(tok, "pad")
    questions = tok.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = list(dict.fromkeys(e.context for e in examples))  # SQuAD repeats a paragraph per question
    encoded = dict(zip(contexts, tok.encode_batch(contexts, add_special_tokens=False)))
    spans_of = {c: _trimmed(c, enc.offsets) for c, enc in encoded.items()}
    ids, types, starts, ends, where, spans, n_cut = [], [], [], [], [], [], 0
    for k, (example, q) in enumerate(zip(examples, questions)):
        q_ids = q.ids[:max_query_length]
        n_cut += len(q.ids) > max_query_length
        width = max_length - len(q_ids) - 3
        if width <= stride:
            raise TaskDataError(f"max_length {max_length} leaves {width} context tokens per window after "
                                f"question {example.id!r}, not more than stride {stride}")
        ctx = encoded[example.context]
        for a, b in pieces(len(ctx.ids), width, stride):
            head = len(q_ids) + 2  # [CLS] question [SEP]
            ids.append([cls, *q_ids, sep, *ctx.ids[a:b], sep])
            types.append([0] * head + [1] * (b - a + 1))
            answer = _answer_tokens(example, spans_of[example.context], a, b)
            starts.append(0 if answer is None else head + answer[0] - a)
            ends.append(0 if answer is None else head + answer[1] - a)
            where.append(k)
            spans.append((head, spans_of[example.context][a:b]))
    lengths = np.array([len(r) for r in ids], dtype=np.int32)
    length = bucket_for(int(lengths.max()), bucket_lengths(max_length))
    offsets = np.full((len(ids), length, 2), -1, dtype=np.int32)
    for w, (head, piece) in enumerate(spans):
        if piece:
            offsets[w, head:head + len(piece)] = piece
    arrays = {"input_ids": pad_rows(ids, length, pad), "token_type_ids": pad_rows(types, length),
              "attention_mask": pad_rows([[1] * len(r) for r in ids], length),
              "start_positions": np.array(starts, dtype=np.int32), "end_positions": np.array(ends, dtype=np.int32)}
    features = Features(arrays, lengths, n_cut, max_length, pad_values={"input_ids": pad})
    return features, QAWindows(np.array(where, dtype=np.int32), offsets, list(examples))


def _best_span(start, end, in_context, n_best: int, max_answer_len: int):
    """(score, first, last) of the best valid span from the top n_best starts and ends, or None."""
    top_s = [i for i in np.argsort(-start, kind="stable")[:n_best] if in_context[i]]
    top_e = [i for i in np.argsort(-end, kind="stable")[:n_best] if in_context[i]]
    if not top_s or not top_e:
        return None
    s, e = np.array(top_s)[:, None], np.array(top_e)[None, :]
    scores = np.where((e >= s) & (e - s + 1 <= max_answer_len), start[s] + end[e], -np.inf)
    i, j = np.unravel_index(np.argmax(scores), scores.shape)
    return (float(scores[i, j]), int(top_s[i]), int(top_e[j])) if np.isfinite(scores[i, j]) else None


def postprocess_qa(start_logits, end_logits, windows: QAWindows, n_best: int = 20, max_answer_len: int = 30,
                   version_2: bool = False) -> Mapping[str, str]:
    """Question id -> predicted answer text, from start / end logits [W, L] over the windows.

    Each window offers its best span among the n_best highest start and end logits that lie in
    the context, end not before start and at most max_answer_len tokens; the question takes the
    best span over its windows, cut from the original context by character offsets. With
    version_2 the answer is "" when the null score (start + end logit at [CLS], lowest over the
    question's windows) beats that span.
    """
    start_logits, end_logits = np.asarray(start_logits, np.float64), np.asarray(end_logits, np.float64)
    if start_logits.shape != end_logits.shape or start_logits.shape[0] != len(windows.example_index):
        raise TaskDataError(f"logits {start_logits.shape} / {end_logits.shape} do not match "
                            f"{len(windows.example_index)} windows")
    width = min(start_logits.shape[1], windows.offsets.shape[1])
    best: dict[int, tuple[float, int, int, int]] = {}
    null: dict[int, float] = {}
    for w, k in enumerate(windows.example_index.tolist()):
        s, e = start_logits[w, :width], end_logits[w, :width]
        null[k] = min(null.get(k, np.inf), float(s[0] + e[0]))
        span = _best_span(s, e, windows.offsets[w, :width, 0] >= 0, n_best, max_answer_len)
        if span is not None and (k not in best or span[0] > best[k][0]):
            best[k] = (*span, w)
    out = {}
    for k, example in enumerate(windows.examples):
        if k not in best or (version_2 and null[k] > best[k][0]):
            out[example.id] = ""
            continue
        _, first, last, w = best[k]
        out[example.id] = example.context[windows.offsets[w, first, 0]:windows.offsets[w, last, 1]]
    return out
