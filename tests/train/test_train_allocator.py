"""jaxbert train's malloc settings: freed blocks stay in the process instead of being faulted in again."""

import subprocess
import sys

import pytest

from jaxbert.cli import train as train_cli
from jaxbert.cli.main import main
from tests.helpers.cli import one_line

_CHILD = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from jaxbert.train.allocator import keep_freed_memory
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
mib, times = int(sys.argv[2]), int(sys.argv[3])
block = np.ones(mib << 20, np.uint8)  # 48 MiB and up: above the largest mmap threshold glibc accepts
del block
before = faults()
for _ in range(times):  # a step's temporaries: allocated, written, freed, again
    block = np.ones(mib << 20, np.uint8)
    del block
print(faults() - before)
"""


def _faults(mode: str, mib: int = 48, times: int = 8) -> int:
    r = subprocess.run([sys.executable, "-c", _CHILD, mode, str(mib), str(times)],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_reused_without_page_faults():
    default, kept = _faults("default"), _faults("keep")
    # glibc unmaps each block on free, so every page (2 MiB ones at best) faults in again
    assert default >= 8 * (48 << 20) // (2 << 20)
    assert kept * 20 <= default


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_more_than_a_gibibyte_freed_at_once_is_kept_too():
    # A bert-base step on CPU frees over 1 GiB at once; a finite trim threshold gave it back.
    default, kept = _faults("default", 1280, 2), _faults("keep", 1280, 2)
    assert default >= 2 * (1280 << 20) // (2 << 20)
    assert kept * 20 <= default


@pytest.mark.parametrize("mode, kept", [("keep", 1), ("system", 0), (None, 1)])
def test_jaxbert_train_keeps_freed_memory_unless_told_system(mode, kept, tmp_path, monkeypatch):
    """A process that runs `jaxbert train` in-process and lives on (this test runner) can keep its malloc."""
    calls = []
    monkeypatch.setattr(train_cli, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(train_cli, "train_and_evaluate",
                        lambda *a, **k: {"status": "stopped", "step": 0, "wall_s": 0.0})
    if mode is None:
        monkeypatch.delenv("JAXBERT_MALLOC", raising=False)
    else:
        monkeypatch.setenv("JAXBERT_MALLOC", mode)
    assert main(["train", "--workdir", str(tmp_path / "run")]) == 0
    assert len(calls) == kept


def test_a_bad_jaxbert_malloc_is_named_and_nothing_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train_cli, "train_and_evaluate", lambda *a, **k: pytest.fail("the run started"))
    monkeypatch.setenv("JAXBERT_MALLOC", "jemalloc")
    assert main(["train", "--workdir", str(tmp_path / "run")]) == 2
    one_line(capsys.readouterr(), "train", "JAXBERT_MALLOC='jemalloc'", "keep, system")
    assert not (tmp_path / "run").exists()
