"""The embedding evaluation against implementations that share no code with it:
sentence-transformers' InformationRetrievalEvaluator (recall@1/@10, MRR@10, nDCG@10 over a pooled
corpus, some queries with several relevant documents) and scipy's Spearman correlation (with ties)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxbert.finetune.kinds.embedding.metrics import pooled_corpus, retrieval, sts_spearman

st = pytest.importorskip("sentence_transformers")

WORDS = ["cat", "dog", "sat", "ran", "mat", "red", "blue", "tree", "bird", "fish", "apple", "river", "stone", "cloud", "green", "quick", "slow", "happy"]


def test_retrieval_metrics_match_information_retrieval_evaluator(tmp_path):
    import jax
    import jax.numpy as jnp

    import jaxbert
    from jaxbert.finetune.kinds.embedding.export import Settings, write_sentence_transformers
    from jaxbert.packaged import minilm_folder
    cfg = jaxbert.BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32, max_position_embeddings=64)
    module = jaxbert.build_model("BertModel", cfg)
    ids = jnp.ones((1, 8), jnp.int32)
    params = module.init(jax.random.key(5), ids, ids * 0, ids)["params"]
    folder = write_sentence_transformers(tmp_path / "st", cfg, "BertModel", params, minilm_folder(),
                                         Settings("mean", True, {}, 32))
    model = st.SentenceTransformer(str(folder), device="cpu")
    rng = np.random.RandomState(0)
    corpus = {f"d{i}": " ".join(rng.choice(WORDS, 6)) for i in range(40)}
    queries = {f"q{i}": " ".join(rng.choice(WORDS, 3)) for i in range(16)}
    relevant = {q: {f"d{j}" for j in rng.choice(40, 1 + i % 3, replace=False)} for i, q in enumerate(queries)}
    from sentence_transformers.evaluation import InformationRetrievalEvaluator
    evaluator = InformationRetrievalEvaluator(queries, corpus, relevant, mrr_at_k=[10], ndcg_at_k=[10],
                                              accuracy_at_k=[1], precision_recall_at_k=[1, 10], map_at_k=[10],
                                              show_progress_bar=False, score_functions={"cosine": st.util.cos_sim})
    theirs = evaluator(model)
    doc_ids, q_ids = list(corpus), list(queries)
    q_emb = model.encode([queries[q] for q in q_ids], convert_to_numpy=True)
    d_emb = model.encode([corpus[d] for d in doc_ids], convert_to_numpy=True)
    ours = retrieval(q_emb, d_emb, [{doc_ids.index(d) for d in relevant[q]} for q in q_ids])
    prefix = next(k for k in theirs if k.endswith("cosine_ndcg@10"))[:-len("cosine_ndcg@10")]
    for key in ("recall@1", "recall@10", "mrr@10", "ndcg@10"):
        assert ours[key] == pytest.approx(theirs[f"{prefix}cosine_{key}"], abs=1e-9), key
    assert 0.05 < ours["ndcg@10"] < 0.95  # a random model: neither nothing nor everything found


def test_pooled_corpus_and_spearman_with_ties():
    from scipy.stats import spearmanr
    corpus, relevant = pooled_corpus([("q1", "a", "b"), ("q2", "b", "c"), ("q3", "d", "a")])
    assert corpus == ["a", "b", "c", "d"] and relevant == [{0}, {1}, {3}]
    rng = np.random.RandomState(1)
    a, b = rng.randn(30, 8), rng.randn(30, 8)
    b[:10] = a[:10] + 0.1 * rng.randn(10, 8)
    gold = np.round(rng.rand(30) * 4) + (np.arange(30) < 10) * 3  # ties among the gold scores
    cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert sts_spearman(a, b, gold) == pytest.approx(spearmanr(cos, gold).statistic, abs=1e-12)
