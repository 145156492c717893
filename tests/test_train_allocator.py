"""jaxbert train's malloc settings: freed blocks stay in the process instead of being faulted in again."""

import subprocess
import sys

import pytest

_CHILD = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from jaxbert.train.allocator import keep_freed_memory
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = np.ones(48 << 20, np.uint8)  # 48 MiB: above the largest mmap threshold glibc accepts
del block
before = faults()
for _ in range(8):  # a step's temporaries: allocated, written, freed, again
    block = np.ones(48 << 20, np.uint8)
    del block
print(faults() - before)
"""


def _faults(mode: str) -> int:
    r = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True)
    return int(r.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_reused_without_page_faults():
    default, kept = _faults("default"), _faults("keep")
    # glibc unmaps each block on free, so every page (2 MiB ones at best) faults in again
    assert default >= 8 * (48 << 20) // (2 << 20)
    assert kept * 20 <= default
