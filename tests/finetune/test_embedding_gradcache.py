"""GradCache and the global batch: the embedding step's loss and gradients (columns at three lengths) do
not depend on how the batch is cut into chunks (float32 tolerance, float64 to rounding) or on how many
devices hold it (8 emulated CPU devices on the mesh runner against one, with hard negatives), and padding
rows of a last batch are neither anchors nor candidates."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert.finetune.kinds.embedding.step import (
    by_column,
    embedder,
    join_rows,
    loss_and_grads,
    split_rows,
)
from tests.helpers.runs import child_env

CONFIG = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
              max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _model(dtype=jnp.float32):
    cfg = jaxbert.BertConfig(**CONFIG)
    module = jaxbert.build_model("BertModel", cfg, jaxbert.ModelOptions(dtype=dtype, param_dtype=dtype))
    ids = jnp.ones((2, 8), jnp.int32)
    params = module.init(jax.random.key(0), ids, ids * 0, ids)["params"]
    return module, params


COLUMN_LENGTHS = (12, 7, 12, 9)  # anchor, positive, 2 hard negatives: three lengths, two columns sharing one


def _batch(rows=8, lengths=COLUMN_LENGTHS, seed=0):
    """The step's batch (by_column): each column at its own length, texts of ragged length within it."""
    rng = np.random.RandomState(seed)
    length = max(lengths)
    ids = rng.randint(1, CONFIG["vocab_size"], (rows, len(lengths), length))
    lens = rng.randint(3, np.asarray(lengths) + 1, (rows, len(lengths)))
    mask = (np.arange(length) < lens[..., None]).astype(np.int32)
    arrays = {"input_ids": jnp.asarray(ids * mask, jnp.int32), "token_type_ids": jnp.zeros_like(jnp.asarray(ids)),
              "attention_mask": jnp.asarray(mask), "valid": jnp.ones(rows, jnp.int32)}
    return by_column(arrays, lengths)


def _max_diff(a, b):
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def _scale(tree):
    return max(float(jnp.max(jnp.abs(x))) for x in jax.tree_util.tree_leaves(tree))


def test_split_and_join_rows_are_inverse_and_keep_device_blocks():
    x = jnp.arange(16)
    parts = split_rows(x, chunks=2, groups=4)  # 4 devices of 4 rows, chunks of 2 rows from each
    assert parts.tolist() == [[0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15]]
    assert join_rows(parts, groups=4).tolist() == x.tolist()


def test_gradcache_equals_the_whole_batch_in_float32_and_padding_rows_count_for_nothing():
    module, params = _model()
    embed, batch, key = embedder(module.apply, "mean"), _batch(), jax.random.key(0)
    step = jax.jit(lambda p, b, chunks, groups: loss_and_grads(embed, p, b, key, temperature=0.05, symmetric=True,
                                                               dims=(16, 8), chunks=chunks, groups=groups,
                                                               deterministic=True), static_argnums=(2, 3))
    whole = step(params, batch, 1, 1)
    cut = step(params, batch, 2, 2)  # 2 chunks, each taking 2 rows of each of 2 blocks
    assert float(cut[0]) == pytest.approx(float(whole[0]), rel=1e-6)
    assert _max_diff(cut[1], whole[1]) <= 1e-5 * _scale(whole[1])
    assert _scale(whole[1]) > 1e-2
    # the last two rows as padding (the same compiled step): the loss and gradients of the six real rows alone
    padded = dict(batch, valid=jnp.asarray([1] * 6 + [0] * 2, jnp.int32))
    loss_pad, grads_pad = step(params, padded, 2, 2)
    loss_six, grads_six = step(params, jax.tree_util.tree_map(lambda x: x[:6], batch), 1, 1)
    assert float(loss_pad) == pytest.approx(float(loss_six), rel=1e-6)
    assert _max_diff(grads_pad, grads_six) <= 1e-5 * _scale(grads_six)
    assert abs(float(loss_six) - float(whole[0])) > 1e-3


def test_gradcache_equals_the_whole_batch_in_float64():
    with jax.enable_x64(True):
        module, params = _model(jnp.float64)
        embed, batch, key = embedder(module.apply, "cls"), _batch(seed=1), jax.random.key(0)
        step = jax.jit(lambda p, b, chunks: loss_and_grads(embed, p, b, key, temperature=0.02, chunks=chunks,
                                                           deterministic=True), static_argnums=2)
        whole, cut = step(params, batch, 1), step(params, batch, 4)
        assert whole[0].dtype == jnp.float64
        assert abs(float(cut[0]) - float(whole[0])) <= 1e-13 * abs(float(whole[0]))
        assert _max_diff(cut[1], whole[1]) <= 1e-12 * _scale(whole[1])


# One train step of the mesh runner (SGD, lr 1: new params = params - gradients) on N emulated devices,
# printed as JSON: the loss, and the new params as lists.
_CHILD = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np, optax
from jaxbert.engine.parallel import MeshRunner
from jaxbert.engine.recipe import ParallelSection
from jaxbert.finetune.kinds.embedding.step import make_train_step
from tests.finetune.test_embedding_gradcache import _batch, _model

n, chunks = int(sys.argv[1]), int(sys.argv[2])
assert len(jax.devices()) == 8
module, params = _model()
runner = MeshRunner(ParallelSection(num_devices=n))
ids = jnp.ones((2, 8), jnp.int32)
runner.prepare(module, lambda: module.init(jax.random.key(0), ids, ids * 0, ids)["params"], optax.sgd(1.0),
               lambda step: 1.0)
state = runner.create_state(runner.place_params(params))
step = runner.compile_train(make_train_step("mean", 0.05, symmetric=True, chunks=chunks, groups=n))
batch = {k: np.asarray(v)[None] for k, v in _batch(rows=16, seed=2).items()}
state, metrics = step(state, runner.shard_batch(batch), jax.random.key(0))
out = {"loss": runner.metrics_to_host(metrics)["loss_sum"] / 16,
       "params": [np.asarray(x).ravel().tolist() for x in jax.tree_util.tree_leaves(state.params)]}
print(json.dumps(out))
"""


def _run_child(n: int, chunks: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(chunks)], env=child_env(devices=8),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_eight_devices_train_the_step_one_device_trains():
    one = _run_child(1, 1)
    eight = _run_child(8, 2)  # 8 devices, each chunk 1 row of every device's 2
    assert eight["loss"] == pytest.approx(one["loss"], rel=1e-5)
    _, params = _model()
    start = [np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(params)]
    moved = max(float(np.max(np.abs(np.asarray(a) - s))) for a, s in zip(one["params"], start))
    assert moved > 1e-3  # the step changed the params
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(one["params"], eight["params"]))
    assert diff <= 1e-5 * moved
