"""`jaxbert bench`'s ModernBERT rows: jaxbert's ModernBertForMaskedLM against transformers' (sdpa,
sparse_prediction) on the same weights and tokens. The rows run here through the harness with the
workers in this process, on a tiny ModernBERT whose sequence (256) reaches past the window (128)."""

import argparse

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from jaxbert.bench import contenders, harness, worker  # noqa: E402

TINY_SHAPES = (("modernbert-2x64", 2, 256),)  # layers: global, local
SMALL_VOCAB = dict(vocab_size=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)


def _args(**kw):
    base = dict(quick=False, repeats=1, rounds=1, e2e_rounds=None, dtype=None, attention=None, malloc="keep",
                no_torch=False, only=["train/modernbert", "infer/modernbert"])
    return argparse.Namespace(**{**base, **kw})


def _in_process(monkeypatch):
    """The harness with its workers built here (worker.Warm) instead of in processes of their own."""
    specs = []

    class Here:
        def __init__(self, spec, env=None):
            specs.append(spec)
            self.warm = worker.Warm({**spec, "pause": 0.0, "warmup": contenders.LossProbe.KEEP})

        def time(self, calls):
            return self.warm.time(calls)

        def finish(self):
            return self.warm.extra()

        def close(self):
            pass
    monkeypatch.setattr(harness, "run_worker", lambda spec, env=None: worker.run(spec))
    monkeypatch.setattr(harness, "start_worker", Here)
    monkeypatch.setattr(harness, "MODERNBERT_SHAPES", TINY_SHAPES)
    real = contenders.modernbert_config
    # a small vocabulary keeps the test fast (the rows' own is base's 50,368); the special ids inside it
    monkeypatch.setattr(contenders, "modernbert_config", lambda layers, hidden: real(layers, hidden, **SMALL_VOCAB))
    return specs


def test_the_rows_are_named_and_selectable():
    names = harness.work_names(quick=False)
    for work in ("train", "infer"):
        for B, T in ((8, 512), (1, 2048), (1, 4096)):
            assert f"{work}/modernbert-6x384/{B}x{T}" in names
    assert [n for n in harness.work_names(quick=True) if "modernbert" in n] == [
        "train/modernbert-6x384/8x512", "infer/modernbert-6x384/8x512"]
    cfg = contenders.modernbert_config(*contenders.modernbert_model("modernbert-6x384"))
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
            cfg.global_attn_every_n_layers, cfg.local_attention) == (6, 384, 6, 576, 3, 128)
    assert contenders.modernbert_model("bert-base") is None


def test_both_contenders_take_the_same_loss_on_the_same_weights_and_tokens(monkeypatch):
    specs = _in_process(monkeypatch)
    bench = harness.Bench(_args())
    bench.run()
    rows = {(r.work, r.contender): r for r in bench.records}
    assert sorted(rows) == [("infer/modernbert-2x64/2x256", "jaxbert"), ("infer/modernbert-2x64/2x256", "torch-eager"),
                            ("train/modernbert-2x64/2x256", "jaxbert"), ("train/modernbert-2x64/2x256", "torch-eager")]
    # jaxbert's best path off a TPU unless --attention says otherwise; transformers with sdpa
    assert {s["options"]["attention"] for s in specs[1:]} == {"auto"}
    for work in ("train", "infer"):
        ours, theirs = rows[(f"{work}/modernbert-2x64/2x256", "jaxbert")], rows[(f"{work}/modernbert-2x64/2x256",
                                                                                  "torch-eager")]
        assert ours.ratio is None and theirs.ratio is not None and theirs.median > 0
        a, b = np.array(ours.extra["losses"]), np.array(theirs.extra["losses"])
        assert a.shape == b.shape == (2,)
        # float32 agreement, on a loss that is not just log(V): the weights are jaxbert's init, not uniform
        np.testing.assert_allclose(a, b, rtol=2e-6)
        assert theirs.extra["loss_gap"] == pytest.approx(np.abs(a - b).max())
        assert abs(a[0] - np.log(SMALL_VOCAB["vocab_size"])) > 100 * abs(a[0] - b[0])
        if work == "train":  # the second loss is after one AdamW update on each side: the same update
            assert abs(a[1] - a[0]) > 100 * abs(a[1] - b[1])
        else:
            assert a[0] == a[1]  # a forward leaves the weights as they were

