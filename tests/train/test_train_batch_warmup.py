"""Batch-size warmup (train.batch_warmup_start / batch_warmup_tokens): the count of micro-batches per
step by hand, the train stream read without a row skipped or repeated as the batch grows, and a run
stopped just before a change of batch resuming to the same params, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.train import sources
from jaxbert.train.batch_warmup import BatchWarmup
from jaxbert.train.recipe import RecipeError
from jaxbert.train.recipe import load as load_recipe
from tests.helpers.runs import final_params, metric_rows, train_losses, write_recipe


def test_micro_batches_grow_with_the_tokens_consumed():
    # full batch 4 x 2 = 8 sequences of 4 tokens, from 4 sequences over 64 tokens. Target at step s:
    # 4 + 4 * min(C_s, 64) / 64 sequences, rounded down to micro-batches of 2:
    # C = 0 -> 4 (2), 16 -> 5 (2), 32 -> 6 (3), 56 -> 7.5 (3), 80 -> 8 (4), then 4 for good
    w = BatchWarmup(start=4, tokens=64, micro=2, accum=4, seq_len=4)
    assert [w.micro_batches(s) for s in range(8)] == [2, 2, 3, 3, 4, 4, 4, 4]
    assert [w.sequences(s) for s in range(5)] == [4, 4, 6, 6, 8]
    # a start below one micro-batch still takes one; ModernBERT-base's 768 of 4608 on 8 devices x 36:
    # 2 of 16 micro-batches of 288 at first, all 16 once 50B tokens are in
    assert BatchWarmup(start=1, tokens=64, micro=2, accum=4, seq_len=4).micro_batches(0) == 1
    mb = BatchWarmup(start=768, tokens=50 * 10**9, micro=288, accum=16, seq_len=1024)
    assert mb.micro_batches(0) == 2 and mb.micro_batches(200_000) == 16


RECIPE = dict(train={"steps": 6, "per_device_batch_size": 2, "accum_steps": 3, "log_every": 1, "eval_every": 0,
                     "eval_batches": 1, "batch_warmup_start": 4, "batch_warmup_tokens": 128},
              checkpoint={"every_steps": 2, "keep": 10})


def _recording(monkeypatch):
    """Wraps the train source: every micro-batch the run reads, as (stream position before it, its rows)."""
    reads = []
    make = sources.make_source

    def recorded(*args, split="train", **kwargs):
        inner = make(*args, split=split, **kwargs)
        if split != "train":
            return inner

        class Recorded:
            def __iter__(self):
                return self

            def __next__(self):
                at = inner.state()["position"]
                batch = next(inner)
                reads.append((at, batch["input_ids"].copy()))
                return batch

            def state(self):
                return inner.state()

            def restore(self, state):
                inner.restore(state)
        return Recorded()
    monkeypatch.setattr(sources, "make_source", recorded)
    return reads


def test_the_stream_continues_exactly_and_resume_is_bit_exact_across_a_change_of_batch(tmp_path, monkeypatch,
                                                                                        capsys, compile_cache):
    recipe = write_recipe(tmp_path / "bw.yaml", **RECIPE)
    reads = _recording(monkeypatch)
    whole = tmp_path / "whole"
    assert main(["train", "--config", str(recipe), "--workdir", str(whole)]) == 0
    assert "batch-size warmup: 4 sequences (2 of 3 micro-batches) growing to 6" in capsys.readouterr().out
    # full 6 sequences of 16 tokens, from 4 over 128 tokens: C = 0, 64, 128 -> 4, 5, 6 sequences
    counts = [2, 2, 3, 3, 3, 3]
    assert [r["batch_size"] for r in metric_rows(whole) if "batch_size" in r] == [2 * n for n in counts]
    # every micro-batch the run read starts where the one before it ended: nothing skipped or repeated
    positions = [at for at, _ in reads]
    assert positions == list(range(0, 2 * len(reads), 2)) and len(reads) >= sum(counts)
    # the rows are the synthetic stream's rows 0, 1, 2, ... in order
    stream = sources.make_source(load_recipe(recipe), None, 2 * len(reads), vocab_size=64)
    np.testing.assert_array_equal(np.concatenate([rows for _, rows in reads]), next(stream)["input_ids"])

    # stopped after step 2 (2 micro-batches each), resumed where step 3 takes 3: the same run, bit for bit
    parts = tmp_path / "parts"
    assert main(["train", "--config", str(recipe), "--workdir", str(parts), "--stop-after", "2"]) == 0
    assert main(["train", "--config", str(recipe), "--workdir", str(parts)]) == 0
    a, b = final_params(whole), final_params(parts)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    np.testing.assert_array_equal(train_losses(parts)[-4:], train_losses(whole)[-4:])


def test_batch_warmup_needs_micro_batches_to_grow_by(tmp_path):
    bad = dict(RECIPE, train=dict(RECIPE["train"], accum_steps=1))
    with pytest.raises(RecipeError, match="train.batch_warmup_start: the batch grows by micro-batches"):
        load_recipe(write_recipe(tmp_path / "r.yaml", **bad))
    bad = dict(RECIPE, train=dict(RECIPE["train"], batch_warmup_tokens=0))
    with pytest.raises(RecipeError, match="train.batch_warmup_tokens: 0"):
        load_recipe(write_recipe(tmp_path / "r2.yaml", **bad))


def test_warmup_tokens_without_a_start_are_refused_not_ignored(tmp_path, capsys):
    """batch_warmup_tokens alone trained at the full batch from step 1, without a word."""
    train = {k: v for k, v in RECIPE["train"].items() if k != "batch_warmup_start"}
    recipe = write_recipe(tmp_path / "r.yaml", **dict(RECIPE, train=train))
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"jaxbert train: error: {recipe}: train.batch_warmup_tokens: 128 tokens of batch-size warmup, but "
        "train.batch_warmup_start (the first step's global batch) is not set"), err
    assert not (tmp_path / "run").exists()
    assert load_recipe(write_recipe(tmp_path / "off.yaml", train=dict(train, batch_warmup_tokens=0)))  # off: fine


def test_a_warmup_start_at_the_full_batch_is_refused_naming_the_key(tmp_path, capsys):
    bad = dict(RECIPE, train=dict(RECIPE["train"], batch_warmup_start=6))  # 2 x 1 device x 3 = 6: nothing to grow
    recipe = write_recipe(tmp_path / "r.yaml", **bad)
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["jaxbert train: error: train.batch_warmup_start: 6 sequences is not below the global batch of 6 "
                   "on 1 device(s); lower it or set it to null"]
    assert not (tmp_path / "run" / "checkpoints").exists()
