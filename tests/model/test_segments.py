"""Packed rows (segment ids): the mask and position functions, and a packed row's documents
computing exactly what each computes alone, for BERT and RoBERTa, on both attention paths."""

import jax
import numpy as np
import pytest

from jaxbert import BertConfig
from jaxbert.model.classes import build_model
from jaxbert.model.options import ModelOptions
from jaxbert.model.segments import segment_lengths, segment_mask, segment_positions, segment_starts

SEG = np.array([[1, 1, 1, 2, 2, 3, 0, 0],
                [1, 1, 1, 1, 1, 1, 1, 1],
                [1, 2, 2, 2, 0, 0, 0, 0]], np.int32)


def test_positions_restart_at_each_document():
    assert np.asarray(segment_positions(SEG)).tolist() == [
        [0, 1, 2, 0, 1, 0, 0, 1],  # padding counted as a run of its own
        [0, 1, 2, 3, 4, 5, 6, 7],
        [0, 0, 1, 2, 0, 1, 2, 3]]
    assert np.asarray(segment_positions(SEG, offset=2, pad_position=1)).tolist() == [
        [2, 3, 4, 2, 3, 2, 1, 1],  # RoBERTa: from pad_token_id + 1, padding at pad_token_id
        [2, 3, 4, 5, 6, 7, 8, 9],
        [2, 2, 3, 4, 1, 1, 1, 1]]
    assert np.asarray(segment_starts(SEG[:1])).tolist() == [[1, 0, 0, 1, 0, 1, 1, 0]]
    assert np.asarray(segment_lengths(SEG, 3)).tolist() == [[2, 3, 2, 1], [0, 8, 0, 0], [4, 1, 3, 0]]


def test_mask_is_block_diagonal_and_windowed():
    m = np.asarray(segment_mask(SEG[2:]))[0].astype(int)
    assert m.tolist() == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 1, 1, 1, 0, 0, 0, 0],
        [0, 1, 1, 1, 0, 0, 0, 0],
        [0, 1, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1, 1]]
    w = np.asarray(segment_mask(SEG[1:2], window=1))[0].astype(int)
    assert w.tolist() == [[int(abs(i - j) <= 1) for j in range(8)] for i in range(8)]
    w = np.asarray(segment_mask(SEG[:1], window=1))[0].astype(int)
    assert w[1].tolist() == [1, 1, 1, 0, 0, 0, 0, 0] and w[2].tolist() == [0, 1, 1, 0, 0, 0, 0, 0]


def _model(model_type, cls):
    pad = 1 if model_type == "roberta" else 0
    cfg = BertConfig(model_type=model_type, vocab_size=97, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
                     pad_token_id=pad, type_vocab_size=1 if model_type == "roberta" else 2)
    return cfg, pad


# Three documents (with [CLS]=2 / [SEP]=3 around them) packed into a row of 24, padded.
DOCS = [[2, 11, 12, 13, 14, 3], [2, 21, 22, 23, 24, 25, 26, 27, 3], [2, 31, 32, 33, 3]]


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
@pytest.mark.parametrize("impl", ["einsum", "dot_product"])
@pytest.mark.parametrize("cls", ["BertForMaskedLM", "BertModel"])
def test_a_packed_row_gives_each_document_what_it_gets_alone(model_type, impl, cls):
    cfg, pad = _model(model_type, cls)
    name = cls.replace("Bert", "Roberta") if model_type == "roberta" else cls
    L = 24
    model = build_model(name, cfg, ModelOptions(attention_impl=impl))
    ids = np.full((2, L), pad, np.int32)
    seg = np.zeros((2, L), np.int32)
    at = 0
    for k, doc in enumerate(DOCS):
        ids[0, at:at + len(doc)], seg[0, at:at + len(doc)] = doc, k + 1
        at += len(doc)
    ids[1], seg[1, :L] = ids[0, ::-1], seg[0, ::-1]  # padding first, documents in reverse order
    ids[1] = np.where(seg[1] == 0, pad, ids[1])
    variables = model.init(jax.random.key(3), ids, np.zeros_like(ids))
    packed = model.apply(variables, ids, np.zeros_like(ids), attention_mask=(seg > 0).astype(np.int32),
                         segment_ids=seg, output_hidden_states=True)
    for row in range(2):
        for k in range(1, len(DOCS) + 1):
            where = np.flatnonzero(seg[row] == k)
            alone = np.full((1, L), pad, np.int32)
            alone[0, :where.size] = ids[row, where]
            mask = (np.arange(L) < where.size).astype(np.int32)[None]
            ref = model.apply(variables, alone, np.zeros_like(alone), attention_mask=mask,
                              output_hidden_states=True)
            for a, b in zip(packed.hidden_states, ref.hidden_states):
                np.testing.assert_allclose(np.asarray(a)[row, where], np.asarray(b)[0, :where.size], atol=1e-5)
            if cls == "BertForMaskedLM":
                np.testing.assert_allclose(np.asarray(packed.logits)[row, where],
                                           np.asarray(ref.logits)[0, :where.size], atol=1e-5)
    # and the same documents unpacked would differ: the test can fail
    crossed = model.apply(variables, ids, np.zeros_like(ids), attention_mask=(seg > 0).astype(np.int32))
    assert np.abs(np.asarray(crossed.last_hidden_state) - np.asarray(packed.last_hidden_state))[seg > 0].max() > 1e-3


def test_without_segment_ids_nothing_changes():
    cfg, _ = _model("bert", "BertForMaskedLM")
    model = build_model("BertForMaskedLM", cfg)
    ids = np.arange(2, 18, dtype=np.int32).reshape(2, 8)
    variables = model.init(jax.random.key(0), ids, np.zeros_like(ids))
    a = model.apply(variables, ids, np.zeros_like(ids))
    b = model.apply(variables, ids, np.zeros_like(ids), segment_ids=np.ones_like(ids))  # one document per row
    np.testing.assert_array_equal(np.asarray(a.logits), np.asarray(b.logits))
