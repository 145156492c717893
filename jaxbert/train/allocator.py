"""Keep freed memory in the process, so a training step's temporaries are not page-faulted back in.

With glibc's default settings every block of 128 KiB and up (the threshold
grows only as such blocks are freed) is a fresh mmap that munmap returns to
the kernel when XLA frees it, and the top of the heap is trimmed back as soon
as 128 KiB lie free there. A jitted CPU step allocates the same temporaries
every time, so each step faults its working set in again: on a small model a
quarter of the CPU time of `jaxbert train` was kernel time. `mallopt` fixes
both thresholds for the rest of the process: blocks up to 32 MiB come from the
heap, and freed memory stays there for the next step to reuse. tcmalloc
(LD_PRELOAD) caches freed memory by itself and is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit
_TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Sets glibc's mmap and trim thresholds; False where the C library is not glibc or tcmalloc is loaded."""
    if "tcmalloc" in os.environ.get("LD_PRELOAD", "") or os.name != "posix":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # only glibc has it: musl or macOS take no tuning here
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
