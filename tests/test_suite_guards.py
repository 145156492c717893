"""The suite's own guards (tests/conftest.py): a worker that dies ends the run and names its test."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_worker_that_segfaults_ends_the_run_naming_its_test(tmp_path):
    """Without --max-worker-restart 0, pytest-xdist 3.8 restarts the worker: here it runs the crashing test
    again in each new worker (5 failures), and in other layouts under --dist loadfile the new worker waits
    forever for the dead one's finished files (CI's run of 339b779)."""
    (tmp_path / "test_a.py").write_text("def test_a1(): pass\n\ndef test_a2(): pass\n")
    (tmp_path / "test_b.py").write_text(textwrap.dedent("""
        import os, signal

        def test_before(): pass

        def test_crash(): os.kill(os.getpid(), signal.SIGSEGV)

        def test_after(): pass
    """))
    (tmp_path / "test_c.py").write_text("def test_c1(): pass\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name in ("JAXBERT_EXPECT_TRANSFORMERS4", "JAXBERT_EXPECT_TRANSFORMERS5", "PYTEST_XDIST_WORKER"):
        env.pop(name, None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "tests.conftest",
                        "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "crashed while running 'test_b.py::test_crash'" in out, out
    assert out.count("crashed while running") == 2 and "1 failed" in out, out  # the report and its summary line
