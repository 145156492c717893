"""Faults: SIGKILL + resume is exact, SIGTERM saves and exits 0, NaN stops, corrupt checkpoints are skipped.

Every run is a child process (one CPU device) of a 1-layer model on synthetic data;
the children share a compilation cache, so only the first one compiles.
"""

from __future__ import annotations

import shutil
import signal
import time

import numpy as np
import pytest

from tests.helpers.runs import (checkpoint_steps, child_env, final_params, metric_rows, run_train, train_child,
                         write_recipe)

STEPS = 12  # checkpoints every 4 steps: 4, 8, 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    env = child_env(cache_dir=root / "jax-cache")
    recipe = write_recipe(root / "tiny.yaml")
    reference = root / "reference"
    r = run_train(["--config", str(recipe), "--workdir", str(reference)], env)
    assert r.returncode == 0, r.stdout
    assert checkpoint_steps(reference) == [4, 8, 12]
    return {"root": root, "env": env, "recipe": recipe, "reference": reference}


def _args(setup, workdir):
    return ["--config", str(setup["recipe"]), "--workdir", str(workdir)]


def _wait_for(predicate, proc, timeout=120.0):
    end = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"child ended early (rc {proc.returncode}): {proc.stdout.read()}")
        if time.time() > end:
            proc.kill()
            raise AssertionError("timed out waiting for the child")
        time.sleep(0.05)


def _assert_same_params(a, b):
    pa, pb = final_params(a), final_params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        assert np.array_equal(pa[k], pb[k]), f"{k} differs: max abs {np.max(np.abs(pa[k] - pb[k]))}"


def test_sigkill_mid_run_then_resume_is_bit_exact(setup, tmp_path):
    wd = tmp_path / "killed"
    proc = train_child(_args(setup, wd), setup["env"], delay=0.3)
    _wait_for(lambda: 4 in checkpoint_steps(wd), proc)
    proc.kill()  # SIGKILL: no handler runs, an async save may be cut off half-written
    proc.wait()
    assert max(checkpoint_steps(wd)) < STEPS, "the child finished before it was killed"
    r = run_train(_args(setup, wd), setup["env"])
    assert r.returncode == 0, r.stdout
    assert "resumed from" in r.stdout
    _assert_same_params(wd, setup["reference"])
    # the resumed run logs every step once more from its checkpoint on; the last losses agree
    ref = [row["loss"] for row in metric_rows(setup["reference"]) if "loss" in row]
    got = [row["loss"] for row in metric_rows(wd) if "loss" in row]
    assert got[-1] == ref[-1]


@pytest.mark.parametrize("extra", [[], ["--set", "optim.mu_dtype=bfloat16"]], ids=["float32-moment", "bf16-moment"])
def test_sigterm_saves_and_exits_zero_then_resumes_exactly(setup, tmp_path, extra):
    reference = setup["reference"]
    if extra:  # the bfloat16 first moment: checkpointed and restored as it was, against its own straight run
        reference = tmp_path / "straight"
        r = run_train(_args(setup, reference) + extra, setup["env"])
        assert r.returncode == 0, r.stdout
        pa, pb = final_params(reference), final_params(setup["reference"])
        assert any(not np.array_equal(pa[k], pb[k]) for k in pa)  # the option changed the trajectory
    wd = tmp_path / "preempted"
    proc = train_child(_args(setup, wd) + extra, setup["env"], delay=0.3)
    _wait_for(lambda: len(metric_rows(wd)) >= 5, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "SIGTERM: saved step" in out
    stopped_at = max(r["step"] for r in metric_rows(wd))
    assert 5 <= stopped_at < STEPS
    assert checkpoint_steps(wd)[-1] == stopped_at  # saved where it stopped, not at the last periodic save
    r = run_train(_args(setup, wd) + extra, setup["env"])
    assert r.returncode == 0, r.stdout
    assert f"checkpoints/{stopped_at}" in r.stdout
    _assert_same_params(wd, reference)


def test_nan_stops_with_step_number_and_keeps_last_good_checkpoint(setup, tmp_path):
    wd = tmp_path / "nan"
    # lr 1e4 without clipping: params explode, then the loss overflows to inf/NaN a few steps in.
    r = run_train(_args(setup, wd) + ["--set", "optim.learning_rate=1e4", "--set", "optim.clip_norm=null",
                                      "--set", "optim.warmup_steps=0", "--set", "checkpoint.every_steps=1"],
                  setup["env"])
    assert r.returncode == 3, r.stdout
    import re
    m = re.search(r"NaN/Inf at step (\d+)", r.stdout)
    assert m, r.stdout
    bad = int(m.group(1))
    steps = checkpoint_steps(wd)
    assert steps and max(steps) == bad - 1, (bad, steps)
    assert f"last good checkpoint, step {bad - 1}" in r.stdout
    params = final_params(wd)
    assert all(np.all(np.isfinite(v)) for v in params.values())


def test_corrupt_newest_checkpoint_falls_back_to_the_one_before(setup, tmp_path):
    wd = tmp_path / "corrupt"
    shutil.copytree(setup["reference"], wd)
    # truncate every data file of step 12: its metadata still looks complete
    for f in (wd / "checkpoints" / "12" / "state").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(b"")
    r = run_train(_args(setup, wd), setup["env"])
    assert r.returncode == 0, r.stdout
    assert "checkpoints/12 is corrupt or incomplete" in r.stdout
    assert "resumed from" in r.stdout and "checkpoints/8" in r.stdout
    assert list((wd / "checkpoints.corrupt").iterdir())[0].name.startswith("12-")
    assert checkpoint_steps(wd) == [4, 8, 12]
    _assert_same_params(wd, setup["reference"])  # steps 9..12 redone exactly


def _tree_bytes(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("override,field", [("model.config.hidden_size=64", "model.config.hidden_size: 32"),
                                            ("model.config.num_hidden_layers=2", "model.config.num_hidden_layers: 1"),
                                            ("optim.mu_dtype=bfloat16", "optim.mu_dtype: None"),
                                            # another optimizer: the arrays' shapes fit, their key paths do not
                                            ("optim.clip_norm=null", "optim.clip_norm: 1.0"),
                                            ("optim.name=lamb", "optim.name: 'adamw'")])
def test_resume_with_a_changed_recipe_is_refused_and_keeps_every_checkpoint(setup, tmp_path, override, field):
    wd = tmp_path / "changed"
    shutil.copytree(setup["reference"], wd)
    before, recipe = _tree_bytes(wd / "checkpoints"), (wd / "recipe.yaml").read_text()
    r = run_train(_args(setup, wd) + ["--set", override, "--set", "train.steps=16"], setup["env"])
    assert r.returncode == 2, r.stdout
    assert "Traceback" not in r.stdout and f"{field} in the checkpoint" in r.stdout, r.stdout
    assert "corrupt" not in r.stdout
    assert "train.steps: 12 in the checkpoint, 16 now" in r.stdout  # every differing field is named
    assert _tree_bytes(wd / "checkpoints") == before and not (wd / "checkpoints.corrupt").exists()
    assert (wd / "recipe.yaml").read_text() == recipe


def test_resume_with_another_dropout_impl_goes_on_and_says_so(setup, tmp_path):
    # Arrays fit either way (dropout has no params): the run goes on, with one line saying what changed.
    wd = tmp_path / "dropout"
    shutil.copytree(setup["reference"], wd)
    r = run_train(_args(setup, wd) + ["--set", "model.dropout_impl=threefry", "--set", "train.steps=13"],
                  setup["env"])
    assert r.returncode == 0, r.stdout
    assert ("note: steps up to 12 drew dropout bits with dropout_impl hash; this run goes on with threefry"
            in r.stdout), r.stdout
    assert checkpoint_steps(wd)[-1] == 13


def test_a_second_training_on_a_locked_workdir_is_refused_while_the_first_finishes(setup, tmp_path):
    wd = tmp_path / "locked"
    first = train_child(_args(setup, wd), setup["env"], delay=0.3)
    _wait_for(lambda: len(metric_rows(wd)) >= 1, first)
    second = run_train(_args(setup, wd), setup["env"])
    assert second.returncode == 2, second.stdout
    assert f"{wd}: another `jaxbert train` (pid {first.pid} on" in second.stdout and "Traceback" not in second.stdout
    out, _ = first.communicate(timeout=180)
    assert first.returncode == 0, out
    assert checkpoint_steps(wd) == [4, 8, 12]
    _assert_same_params(wd, setup["reference"])
    assert [r["step"] for r in metric_rows(wd) if "loss" in r] == list(range(1, STEPS + 1))  # one writer
    assert (wd / ".jaxbert-train.lock").read_text() == ""  # released on exit


def test_a_stale_lock_is_taken_over_with_a_message(tmp_path):
    import socket
    import subprocess
    import sys
    from jaxbert.engine.lock import LOCK_NAME, workdir_lock
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / LOCK_NAME).write_text(f"{dead.stdout.strip()} {socket.gethostname()}\n")  # a crashed run's record
    said = []
    with workdir_lock(tmp_path, log=said.append):
        assert (tmp_path / LOCK_NAME).read_text().split()[0] == str(__import__("os").getpid())
    assert said == [f"{tmp_path / LOCK_NAME}: took over the stale lock of pid {dead.stdout.strip()} on "
                    f"{socket.gethostname()} (no longer running)"]
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_export_writes_only_where_nothing_is_lost(setup, tmp_path, capsys):
    from jaxbert.cli.main import main
    wd = tmp_path / "wd"
    shutil.copytree(setup["reference"], wd)
    ckpts = _tree_bytes(wd / "checkpoints")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "letter.txt").write_text("keep me")
    for dst in (docs, wd, tmp_path):  # user files, the workdir itself, a folder holding the workdir
        for extra in ([], ["--overwrite"]):
            assert main(["export", str(wd), str(dst)] + extra) == 2
            err = capsys.readouterr().err
            assert "refusing" in err or "overlaps the source" in err, err
            assert len(err.strip().splitlines()) == 1
    assert (docs / "letter.txt").read_text() == "keep me" and _tree_bytes(wd / "checkpoints") == ckpts
    assert main(["export", str(wd), str(tmp_path / "hf")]) == 0
    assert main(["export", str(wd), str(tmp_path / "hf")]) == 2 and "--overwrite" in capsys.readouterr().err
    assert main(["export", str(wd), str(tmp_path / "hf"), "--overwrite"]) == 0
    assert main(["export", str(wd), str(wd / "hf-export")]) == 0  # a new folder inside the workdir is fine
    assert _tree_bytes(wd / "checkpoints") == ckpts


_FULL_DISK = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))  # checkpoint files are larger: EFBIG, as on a full disk
from jaxbert.cli.main import main
sys.exit(main(["train"] + sys.argv[1:]))
"""


def test_a_full_disk_during_training_is_one_line_exit_2(setup, tmp_path):
    import subprocess
    import sys
    wd = tmp_path / "full"
    r = subprocess.run([sys.executable, "-c", _FULL_DISK, *_args(setup, wd)], env=setup["env"], timeout=300,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 2, r.stdout
    # One line from jaxbert. (Orbax logs the failed write as ERROR lines, and tensorstore callbacks may
    # print "Event loop is closed" tracebacks from its own threads afterwards; none come from jaxbert.)
    # Those threads write to the same pipe without waiting for a line end, so jaxbert's line is found
    # wherever it starts (one full-suite run exited 2 with no line starting with it; alone it passes).
    tag = "jaxbert train: error:"
    assert r.stdout.count(tag) == 1, r.stdout
    ours = [line[line.index(tag):] for line in r.stdout.splitlines() if tag in line]
    assert len(ours) == 1 and ours[0].startswith(f"{tag} {wd / 'checkpoints'}: cannot write a checkpoint"), r.stdout
    assert "File Too Large" in ours[0].title() and not _package_frames(r.stdout), r.stdout


def _package_frames(text: str) -> list[str]:
    """Traceback lines (`File "PATH", line N`) in text whose file is one of the jaxbert package's own,
    by its installed folder: in a checkout named jaxbert with CI's .venv inside it, every orbax path
    holds "/jaxbert/" too."""
    import os
    import re
    import jaxbert
    package = os.path.realpath(os.path.dirname(jaxbert.__file__)) + os.sep
    return [line for line in text.splitlines()
            if (m := re.match(r'\s*File "([^"]+)"', line)) and os.path.realpath(m.group(1)).startswith(package)]


def test_package_frames_are_told_by_the_installed_folder_not_a_substring():
    import os
    import jaxbert
    own = os.path.join(os.path.dirname(jaxbert.__file__), "workdir.py")
    checkout = "/home/ci/jaxbert/.venv/lib/python3.11/site-packages/orbax/checkpoint/_src/path/async_utils.py"
    text = (f'Traceback (most recent call last):\n  File "{checkout}", line 61, in _wait\n    raise e\n'
            f'  File "{own}", line 233, in save\n')
    assert _package_frames(text) == [f'  File "{own}", line 233, in save']
    assert _package_frames(text.replace(f'  File "{own}", line 233, in save\n', "")) == []


def test_reading_a_checkpoint_that_a_running_job_deletes_reads_the_newer_one(setup, tmp_path, monkeypatch):
    # A run with checkpoint.keep=1 saves 12 and deletes 8 and 4 between our listing and our read:
    # the reader lists again and returns step 12 instead of "no readable checkpoint".
    from jaxbert import workdir as workdir_lib
    from jaxbert.workdir import checkpoints
    wd = tmp_path / "running"
    shutil.copytree(setup["reference"], wd)
    newer = tmp_path / "12"
    (wd / "checkpoints" / "12").rename(newer)
    listed = checkpoints._steps  # read_params lists the steps through it
    calls = []

    def steps_then_the_run_moves_on(root):
        found = listed(root)
        if not calls:  # the run saves 12 and deletes the older steps right after our first listing
            newer.rename(wd / "checkpoints" / "12")
            for s in (4, 8):
                shutil.rmtree(wd / "checkpoints" / str(s))
        calls.append(found)
        return found

    monkeypatch.setattr(checkpoints, "_steps", steps_then_the_run_moves_on)
    said = []
    params, meta = workdir_lib.read_params(wd, log=said.append)
    assert calls[0] == [8, 4] and meta["step"] == 12 and not said
    final = final_params(setup["reference"])
    from flax import traverse_util
    got = traverse_util.flatten_dict(params, sep="/")
    assert all(np.array_equal(got[k], final[k]) for k in final)
