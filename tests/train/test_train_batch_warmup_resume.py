"""Batch-size warmup across a resume at another micro-batch size (#50.10), and the compiled shapes of a
warmup (#50.27): the padding that lets a handful of shapes serve every count weighs nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert import BertConfig, BertForPreTraining
from jaxbert.cli.main import main
from jaxbert.engine.optim import make_optimizer
from jaxbert.engine.step import TrainState
from jaxbert.model.options import ModelOptions
from jaxbert.train import loop
from jaxbert.train.batch_warmup import BatchWarmup
from jaxbert.train.mlm import train_step
from jaxbert.train.recipe import OptimSection
from jaxbert.train.sources import SyntheticMLM
from tests.helpers.runs import loader_position, metric_rows, write_recipe

T = 16  # the tiny recipe's seq_len


def test_a_resumed_warmup_goes_on_from_the_tokens_read_not_from_step_zero():
    # 8 sequences a step at first, 32 in full, over 1,256 tokens: micro-batches of 8 read 8, 8, 8, 8, 16, 16
    # sequences (896 tokens) in steps 0-5; resumed there with micro-batches of 4, the batch goes on from 896
    # tokens (24, then 32 at step 7, as uninterrupted), where a replay from step 0 at the new size gave
    # 8, 8, 12, 12, 16, 16 for steps 0-5 and the full 32 already at step 6
    a = BatchWarmup(start=8, tokens=1256, micro=8, accum=4, seq_len=T)
    whole = [a.sequences(s) for s in range(10)]
    assert whole == [8, 8, 8, 8, 16, 16, 24, 32, 32, 32]
    b = BatchWarmup(start=8, tokens=1256, micro=4, accum=8, seq_len=T)
    b.resume(6, sum(whole[:6]) * T)
    assert [b.sequences(s) for s in range(6, 10)] == whole[6:]


RECIPE = dict(train={"steps": 10, "per_device_batch_size": 8, "accum_steps": 4, "log_every": 1, "eval_every": 0,
                     "eval_batches": 1, "batch_warmup_start": 8, "batch_warmup_tokens": 1256},
              checkpoint={"every_steps": 2, "keep": 10})


def test_a_run_resumed_at_another_micro_batch_size_reads_what_an_uninterrupted_one_reads(tmp_path, compile_cache):
    recipe = write_recipe(tmp_path / "bw.yaml", **RECIPE)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main(["train", "--config", str(recipe), "--workdir", str(whole)]) == 0
    assert main(["train", "--config", str(recipe), "--workdir", str(parts), "--stop-after", "6"]) == 0
    # the same global batch (32) in micro-batches of 4: twice the accumulation
    assert main(["train", "--config", str(recipe), "--workdir", str(parts), "--set", "train.per_device_batch_size=4",
                 "--set", "train.accum_steps=8"]) == 0
    sizes = {r["step"]: r["batch_size"] for r in metric_rows(whole) if "batch_size" in r}
    assert list(sizes.values()) == [8, 8, 8, 8, 16, 16, 24, 32, 32, 32]  # full from step 8 (1-based)
    resumed = {r["step"]: r["batch_size"] for r in metric_rows(parts) if "batch_size" in r and r["step"] > 6}
    assert resumed == {s: sizes[s] for s in range(7, 11)}
    # the same sequences read by every step: 272 by step 10 (a replay from step 0 at the new size read 276)
    for step in (6, 8, 10):
        assert loader_position(parts, step) == loader_position(whole, step) == sum(sizes[s] for s in range(1, step + 1))


def test_a_warmup_compiles_a_handful_of_shapes_not_one_per_count(tmp_path, monkeypatch):
    # ModernBERT-base: 2 .. 16 micro-batches of 288 on 8 devices, 15 counts: 7 compiled shapes serve
    assert BatchWarmup(start=768, tokens=50 * 10**9, micro=288, accum=16, seq_len=1024).buckets == [2, 3, 4, 6, 8,
                                                                                                    12, 16]
    # a tiny run growing from 1 to 8 micro-batches of 2: counts 5 and 7 run as 6 and 8
    shapes, counts = [], []
    batches = loop.MlmTask.batches

    def recorded(self, start):
        for batch, state in batches(self, start):
            shapes.append(batch["input_ids"].shape[0])
            counts.append(int((batch["masked_weights"].sum(axis=(1, 2)) > 0).sum()))
            yield batch, state
    monkeypatch.setattr(loop.MlmTask, "batches", recorded)
    recipe = write_recipe(tmp_path / "bw.yaml", train={
        "steps": 12, "per_device_batch_size": 2, "accum_steps": 8, "log_every": 1, "eval_every": 0,
        "eval_batches": 1, "batch_warmup_start": 2, "batch_warmup_tokens": 640})
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 0
    sizes = [r["batch_size"] // 2 for r in metric_rows(tmp_path / "run") if "batch_size" in r]
    assert len(set(sizes)) >= 6 and sizes[-1] == 8, sizes  # many counts on the way to the full 8
    assert counts[:12] == sizes  # the micro-batches that weigh anything are the step's own
    buckets = (1, 2, 3, 4, 6, 8)
    assert set(shapes) <= set(buckets) and {5, 7} & set(sizes), (shapes, sizes)  # some counts were padded
    assert all(shape == min(b for b in buckets if b >= n) for shape, n in zip(shapes, counts))


def test_padding_a_step_to_its_bucket_changes_nothing_it_computes():
    """5 micro-batches of NSP data padded to 6 (a copy weighing nothing) give the 5's update and sums."""
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(cfg, ModelOptions())
    ids = jnp.zeros((1, T), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    tx, schedule = make_optimizer(OptimSection(learning_rate=1e-2, schedule="constant"), 10)
    state = TrainState.create(model.apply, params, tx, schedule)
    source = SyntheticMLM(64, 4, T, seed=3, mask_rate=0.25, nsp=True)
    three = loop._take(source, 5)
    warmup = BatchWarmup(start=4, tokens=10**6, micro=4, accum=8, seq_len=T)
    assert warmup.buckets == [1, 2, 3, 4, 6, 8] and warmup.bucket(5) == 6
    padded = loop._padded(dict(three), warmup, nsp=True)
    assert padded["input_ids"].shape[0] == 6 and padded["next_sentence_weights"][:5].all()
    assert not padded["next_sentence_weights"][5:].any() and not padded["masked_weights"][5:].any()
    rng = jax.random.PRNGKey(1)
    a_state, a = train_step(state, {**three, "next_sentence_weights": np.ones((5, 4), np.float32)}, rng)
    b_state, b = train_step(state, padded, rng)
    _, plain = train_step(state, three, rng)  # the weights of ones change nothing either
    for key in ("mlm_loss_sum", "mlm_weight", "nsp_loss_sum", "nsp_count", "nsp_correct", "grad_norm"):
        np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-6, err_msg=key)
        np.testing.assert_allclose(float(plain[key]), float(a[key]), rtol=1e-6, err_msg=key)
    for x, y in zip(jax.tree_util.tree_leaves(a_state.params), jax.tree_util.tree_leaves(b_state.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-7)


def test_the_time_left_during_a_warmup_is_costed_by_micro_batches_not_steps(monkeypatch):
    """Steps that take 1, then 2, ... 8 micro-batches: an estimate from the first (cheap) steps at a step
    rate fell short by the growth to come (#50.25: modernbert-tiny-phase1 predicted 1 min 58 s, took 2 min
    40 s); costed by the steps' compiled micro-batches it is the time the steps take."""
    from jaxbert.engine import progress as progress_lib

    warmup = BatchWarmup(start=2, tokens=4096, micro=2, accum=8, seq_len=T)
    clock = [0.0]
    monkeypatch.setattr(progress_lib.time, "time", lambda: clock[0])
    lines = []
    total = 200
    p = progress_lib.Progress("x", total, 0, 0, 1, lines.append, active=False,
                              work=lambda first, last: warmup.work(first - 1, last - 1))
    cost = [0.01 * warmup.bucket(warmup.micro_batches(s)) for s in range(total)]  # seconds per step
    clock[0] = 5.0  # the compile
    p.step(1)
    for step in range(2, total + 1):
        clock[0] += cost[step - 1]
        p.step(step)
        if step == 40:
            left = p.eta(step)
    assert warmup.micro_batches(0) == 1 and warmup.full(60), [warmup.micro_batches(s) for s in range(60)]
    assert left == pytest.approx(sum(cost[40:]), rel=0.01)
    assert any(line.startswith("timed ") for line in lines)
