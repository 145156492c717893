"""A training run's evaluations of the embedding kind: each --eval file scored by retrieval or, for a
file of STS pairs, by the Spearman correlation of their cosines with the gold scores.

``read_evals`` reads every eval file (kinds.embedding.read_embedding_eval: a file whose first row has the
--label-column is STS pairs); ``main_metric`` is what picks the best checkpoint: nDCG@10 of the first
file, or its Spearman when that file is STS pairs. ``Evaluator`` tokenizes every text once and embeds
with one compiled function per batch shape, kept across the run's evaluations; it embeds as
``export.encode`` does (each column's prompt in front, the run's pooling, L2-normalised).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.finetune.features import sequence_arrays, special_id
from jaxbert.finetune.features import encode as encode_texts
from jaxbert.finetune.kinds.embedding import read_embedding_eval
from jaxbert.finetune.kinds.embedding.loss import normalise, pool
from jaxbert.finetune.kinds.embedding.metrics import pooled_corpus, retrieval, sts_spearman

RETRIEVAL_MAIN, STS_MAIN = "ndcg@10", "spearman"


@dataclasses.dataclass
class EvalSet:
    """One eval file: retrieval rows or STS pairs (sts), its examples."""

    name: str
    path: str
    sts: bool
    examples: list


def read_evals(spec) -> dict[str, EvalSet]:
    """Every --eval file of the spec, read and checked (TaskDataError naming the file and line)."""
    out = {}
    for name, path in spec.evals.items():
        examples, sts = read_embedding_eval(path, spec.text_columns, spec.label_column)
        out[name] = EvalSet(name, str(path), sts, examples)
    return out


def main_metric(evals: dict[str, EvalSet]) -> tuple[str, str]:
    """(eval set, metric) that picks the best checkpoint: the first file's nDCG@10, or its Spearman."""
    if not evals:
        return "train", RETRIEVAL_MAIN
    first = next(iter(evals.values()))
    return first.name, STS_MAIN if first.sts else RETRIEVAL_MAIN


class Evaluator:
    """Scores a model's encoder params on every eval set; texts tokenized once, the embedding function
    compiled once per batch shape for the whole run."""

    def __init__(self, model, tok, evals: dict[str, EvalSet], pooling: str, prompts: dict, max_length: int,
                 batch_size: int = 32):
        self.batch_size, self.evals, self._tok = batch_size, evals, tok
        self._pad = special_id(tok, "pad")
        self._relevant = {}  # retrieval set -> each anchor's relevant corpus indices

        def embed(params, ids, mask):
            out = model.apply({"params": params}, ids, jnp.zeros_like(ids), mask, deterministic=True)
            return normalise(pool(out.last_hidden_state, mask, pooling))
        self._embed = jax.jit(embed)
        self._texts = {}  # eval set -> [(arrays of each side)] tokenized once
        for name, ev in evals.items():
            cols = ev.examples[0].columns
            rows = [e.texts for e in ev.examples]
            if ev.sts:
                sides = [[r[0] for r in rows], [r[1] for r in rows]]
            else:
                corpus, relevant = pooled_corpus(rows)
                sides = [[r[0] for r in rows], corpus]
                self._relevant[name] = relevant
            self._texts[name] = [self._tokenize(texts, prompts.get(col, ""), max_length)
                                 for texts, col in zip(sides, cols[:2])]

    def _tokenize(self, texts, prompt: str, max_length: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """(ids, mask, real rows) per batch, rows padded to the batch size and length to its bucket."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            encodings, _ = encode_texts(self._tok, [prompt + t for t in texts[start:start + self.batch_size]],
                                        max_length)
            arrays, _, length = sequence_arrays(encodings, max_length, self._pad)  # cut to its bucket length
            n = len(encodings)
            ids = np.full((self.batch_size, length), self._pad, np.int32)
            mask = np.zeros((self.batch_size, length), np.int32)
            ids[:n], mask[:n] = arrays["input_ids"], arrays["attention_mask"]
            mask[n:, 0] = 1  # padding rows attend to one token: no empty softmax; dropped below
            out.append((ids, mask, n))
        return out

    def _side(self, params, batches) -> np.ndarray:
        return np.concatenate([np.asarray(self._embed(params, ids, mask))[:n] for ids, mask, n in batches])

    def __call__(self, params) -> dict[str, dict]:
        """{eval set: its metrics} for the encoder's params (on the host)."""
        params = jax.device_put(params)
        out = {}
        for name, ev in self.evals.items():
            a, b = (self._side(params, side) for side in self._texts[name])
            if ev.sts:
                out[name] = {STS_MAIN: sts_spearman(a, b, [e.score for e in ev.examples])}
            else:
                out[name] = retrieval(a, b, self._relevant[name])
        return out
