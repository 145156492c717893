"""Turn tokenized documents into fixed-length rows: packed MLM rows and NSP sentence pairs.

MLM (RoBERTa's FULL-SENTENCES): the documents are joined with [SEP] into one stream, cut into
bodies of L - 2 tokens, and each body becomes `[CLS] body [SEP]`. A separator that would open a
body is dropped (the [SEP] closing the previous row already marks the boundary). Only the last
row of the stream is padded. Long documents simply continue into the next row.

Documents (`packing: documents`): every document, or piece of at most L - 2 tokens of a longer
one, becomes `[CLS] piece [SEP]`, and several of them share a row when they fit, with a per-token
segment id (0 = padding, 1..k = the pieces of the row, in order) that the model turns into a
block-diagonal attention mask and positions restarting at each piece (jaxbert.model.segments).
A document is split only when it is longer than a row. Rows are filled first-fit over a window
of open rows (a row closes, oldest first, when more than `open_rows` are open), so the rows
depend only on the order of the documents. `packing: none` puts each piece in a row of its own.

NSP (the original BERT recipe): within each document, sentences are gathered up to a target
length, split at a random sentence boundary into A and B; half the time (always when there is
only one sentence) B is replaced by sentences from another document and labelled 1 ("random"),
else labelled 0 ("is next"). Rows are `[CLS] A [SEP] B [SEP] [PAD]...`; too-long pairs are
trimmed on the longer side, A from its front and B from its back, so the A|B junction survives.
"""

from __future__ import annotations

import re

import numpy as np

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


class MLMPacker:
    """Packs documents chunk by chunk; the partial row carries over to the next chunk."""

    def __init__(self, max_length: int, cls_id: int, sep_id: int, pad_id: int, dtype=np.uint16):
        if max_length < 3:
            raise ValueError(f"max_length must be at least 3 for [CLS] x [SEP], got {max_length}")
        self.L, self.C = max_length, max_length - 2
        self.cls, self.sep, self.pad, self.dtype = cls_id, sep_id, pad_id, dtype
        self.carry = np.zeros(0, dtype)  # body tokens of the open row
        self.started = False  # whether any document came before (a separator is due)
        self.padding = 0

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Pack documents (`tokens` concatenated, `lengths` [D]); return the rows completed, [N, L]."""
        lengths = np.asarray(lengths, np.int64)
        lengths = lengths[lengths > 0]
        if lengths.size == 0:
            return np.zeros((0, self.L), self.dtype)
        C = self.C
        p = self.carry.size  # stream position inside the open row's body
        offsets = np.empty(lengths.size, np.int64)
        # A scalar walk per document (never per token): where each document lands in the stream.
        for i, n in enumerate(lengths.tolist()):
            if (self.started or i > 0) and p % C:
                p += 1  # the separator
            offsets[i] = p
            p += n
        self.started = True
        stream = np.full(p, self.sep, self.dtype)
        stream[: self.carry.size] = self.carry
        starts = np.cumsum(lengths) - lengths
        dest = np.repeat(offsets - starts, lengths) + np.arange(lengths.sum())
        stream[dest] = tokens
        full = p // C
        self.carry = stream[full * C:].copy()
        return self._wrap(stream[: full * C].reshape(full, C))

    def finish(self) -> np.ndarray:
        """The padded last row, if a partial one is open: [0 or 1, L]."""
        if self.carry.size == 0:
            return np.zeros((0, self.L), self.dtype)
        body = np.full((1, self.C), self.pad, self.dtype)
        body[0, : self.carry.size] = self.carry
        rows = self._wrap(body)
        rows[0, self.carry.size + 1] = self.sep
        rows[0, self.carry.size + 2:] = self.pad
        self.padding += self.C - self.carry.size
        self.carry = np.zeros(0, self.dtype)
        return rows

    def _wrap(self, bodies: np.ndarray) -> np.ndarray:
        rows = np.empty((bodies.shape[0], self.L), self.dtype)
        rows[:, 0] = self.cls
        rows[:, 1:-1] = bodies
        rows[:, -1] = self.sep
        return rows


class DocumentPacker:
    """Packs whole documents (pieces of long ones) into rows with segment ids; the open rows carry
    over to the next chunk. `one_per_row`: each piece alone in its row (packing: none)."""

    def __init__(self, max_length: int, cls_id: int, sep_id: int, pad_id: int, dtype=np.uint16,
                 one_per_row: bool = False, open_rows: int = 16):
        if max_length < 3:
            raise ValueError(f"max_length must be at least 3 for [CLS] x [SEP], got {max_length}")
        self.L, self.C = max_length, max_length - 2
        self.cls, self.sep, self.pad, self.dtype = cls_id, sep_id, pad_id, dtype
        self.seg_dtype = segment_dtype(max_length)
        self.open_rows = 0 if one_per_row else open_rows
        self.open: list[list] = []  # per open row: [used tokens, [piece arrays]]
        self.padding = 0
        self.pieces = 0

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pack documents (`tokens` concatenated, `lengths` [D]); return the rows closed, as
        (token rows [N, L], segment ids [N, L])."""
        lengths = np.asarray(lengths, np.int64)
        closed = []
        starts = np.cumsum(lengths) - lengths
        for start, n in zip(starts.tolist(), lengths.tolist()):  # a scalar walk per document
            for a in range(start, start + n, self.C):
                self._place(tokens[a:min(a + self.C, start + n)], closed)
        return self._rows(closed)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows still open, oldest first."""
        closed, self.open = self.open, []
        return self._rows(closed)

    def _place(self, piece: np.ndarray, closed: list) -> None:
        need = piece.size + 2
        self.pieces += 1
        for r, row in enumerate(self.open):
            if row[0] + need <= self.L:
                row[0] += need
                row[1].append(piece)
                break
        else:
            r = len(self.open)
            self.open.append([need, [piece]])
        if self.L - self.open[r][0] < 3:  # no piece fits any more ([CLS] x [SEP] takes 3): close it now
            closed.append(self.open.pop(r))
        elif len(self.open) > self.open_rows:
            closed.append(self.open.pop(0))

    def _rows(self, closed: list) -> tuple[np.ndarray, np.ndarray]:
        rows = np.full((len(closed), self.L), self.pad, self.dtype)
        segs = np.zeros((len(closed), self.L), self.seg_dtype)
        for r, (used, pieces) in enumerate(closed):
            at = 0
            for k, piece in enumerate(pieces):
                n = piece.size
                rows[r, at] = self.cls
                rows[r, at + 1:at + 1 + n] = piece
                rows[r, at + 1 + n] = self.sep
                segs[r, at:at + n + 2] = k + 1
                at += n + 2
            self.padding += self.L - used
        return rows, segs


def segment_dtype(max_length: int):
    """The smallest unsigned dtype holding the segment ids of a row (at most L // 3 pieces)."""
    return np.uint8 if max_length // 3 < 256 else np.uint16


def split_sentences(text: str) -> list[str]:
    """Lines, each cut after sentence-final punctuation followed by space."""
    out = []
    for line in text.splitlines():
        out += [s for s in _SENTENCE_END.split(line.strip()) if s]
    return out


def fit_pair(la: int, lb: int, cap: int) -> tuple[int, int]:
    """Lengths after trimming one token at a time from the longer side (B on ties) to fit `cap`."""
    excess = la + lb - cap
    if excess <= 0:
        return la, lb
    gap = abs(la - lb)
    if gap >= excess:
        return (la - excess, lb) if la > lb else (la, lb - excess)
    rest, both = excess - gap, min(la, lb)
    return both - rest // 2, both - (rest + 1) // 2


def nsp_examples(docs: list[list[np.ndarray]], max_length: int, rng: np.random.Generator,
                 cls_id: int, sep_id: int, pad_id: int, short_seq_prob: float = 0.1, dtype=np.uint16):
    """Sentence-pair rows from documents given as lists of sentence token arrays.

    Returns rows [N, L] (dtype), a_lengths int [N] (tokens of A) and labels uint8 [N]
    (0: B follows A in the document, 1: B is from another document).
    """
    cap = max_length - 3
    if cap < 2:
        raise ValueError(f"max_length must be at least 5 for sentence pairs, got {max_length}")
    piece = max(1, cap // 2)  # an over-long sentence becomes pieces, so a pair can still be formed
    docs = [[part for s in d if len(s)
             for part in ([s] if len(s) <= cap else np.split(s, range(piece, len(s), piece)))] for d in docs]
    rows, a_lens, labels = [], [], []

    def emit(a, b, label):
        la, lb = fit_pair(len(a), len(b), cap)
        a, b = a[len(a) - la:], b[:lb]
        row = np.full(max_length, pad_id, dtype)
        row[0], row[1:1 + la], row[1 + la] = cls_id, a, sep_id
        row[2 + la:2 + la + lb], row[2 + la + lb] = b, sep_id
        rows.append(row), a_lens.append(la), labels.append(label)

    live = [i for i, d in enumerate(docs) if d]
    for di, doc in enumerate(docs):
        target = cap if rng.random() >= short_seq_prob else int(rng.integers(2, cap + 1))
        chunk, i = [], 0
        while i < len(doc):
            chunk.append(doc[i])
            if i == len(doc) - 1 or sum(map(len, chunk)) >= target:
                a_end = 1 if len(chunk) == 1 else int(rng.integers(1, len(chunk)))
                a = np.concatenate(chunk[:a_end])
                if len(chunk) == 1 or rng.random() < 0.5:
                    others = [j for j in live if j != di] or [di]
                    other = docs[others[int(rng.integers(len(others)))]]
                    start, b = int(rng.integers(len(other))), []
                    for s in other[start:]:
                        b.append(s)
                        if sum(map(len, b)) >= target - len(a):
                            break
                    emit(a, np.concatenate(b), 1)
                    i -= len(chunk) - a_end  # the unused sentences start the next pair
                else:
                    emit(a, np.concatenate(chunk[a_end:]), 0)
                chunk = []
                target = cap if rng.random() >= short_seq_prob else int(rng.integers(2, cap + 1))
            i += 1
    if not rows:
        return np.zeros((0, max_length), dtype), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    return np.stack(rows), np.asarray(a_lens, np.int64), np.asarray(labels, np.uint8)
