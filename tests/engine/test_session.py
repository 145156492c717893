"""The run setup every task shares (jaxbert.engine.session): the RNG keys, and the checkpoint manager
and metrics writer closed however a run ends."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest

from jaxbert.engine.recipe import CheckpointSection
from jaxbert.engine.session import Session, Start, init_key, steps_key


def test_the_seed_splits_into_the_init_key_then_the_steps_key():
    # the convention the demo fingerprint and every bit-exact resume were recorded with
    first, second = jax.random.split(jax.random.PRNGKey(7))
    np.testing.assert_array_equal(init_key(7), first)
    np.testing.assert_array_equal(steps_key(7), second)
    assert not np.array_equal(init_key(7), steps_key(7))


class _Failing:
    """A runner whose step does not compile, and a task that records being closed."""
    closed = False

    def compile_train(self, fn):
        raise RuntimeError("no compiler here")

    def close(self):
        self.closed = True


def test_a_run_that_fails_closes_its_task_checkpoints_and_writer(tmp_path):
    session = Session(tmp_path, CheckpointSection(every_steps=1, keep=1, async_save=False), log=lambda m: None,
                      primary=True)
    task = runner = _Failing()
    task.step, task.total, task.log_every = types.SimpleNamespace(name="fake"), 3, 1
    with pytest.raises(RuntimeError, match="no compiler here"):
        with session:
            session.train(task, runner, Start(0, None, None, None))
    assert task.closed and session.ckpt is None and session.writer is None
    writer_file = tmp_path / "metrics.jsonl"
    assert writer_file.exists()  # the writer was opened for the run, then closed with it
    session.close()  # a second close does nothing
