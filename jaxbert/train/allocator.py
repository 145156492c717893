"""Keep freed memory in the process, so a training step's temporaries are not page-faulted back in.

XLA's CPU runtime allocates a step's temporaries afresh on every call, some
blocks larger than 32 MiB, which glibc serves with mmap whatever its threshold
says (32 MiB is the most mallopt accepts) and returns to the kernel on free;
smaller freed blocks at the top of a heap are trimmed away too. The next step
page-faults all of it back in, and the kernel's time in those faults is time
the step does not compute (docs/benchmarks.md has the figures and the command).
`mallopt` turns mmap off (every block comes from the heap), never trims the
top of the heap (any finite trim threshold lets a step whose temporaries free
more than that at once hand them back), and puts every thread on one arena,
whose heap is the one kept. The process keeps its peak heap until it exits, which a
training run reaches in its first steps anyway. tcmalloc (LD_PRELOAD) caches freed memory
by itself and is left alone.

`jaxbert train` sets this at start unless JAXBERT_MALLOC=system: a process that runs the verb
in-process and lives on (a notebook, a test runner) would otherwise keep every later peak too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from jaxbert.errors import InputError

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
# A trim threshold of -1 is SIZE_MAX inside glibc (mallopt's int becomes its size_t): never trim.
_SETTINGS = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, -1), (_M_ARENA_MAX, 1))
MALLOC_ENV = "JAXBERT_MALLOC"
MALLOC_MODES = ("keep", "system")  # keep: keep_freed_memory(); system: the C library's own settings


def malloc_mode() -> str:
    """JAXBERT_MALLOC's value (keep when unset); any other value is refused by name."""
    mode = os.environ.get(MALLOC_ENV, "keep")
    if mode not in MALLOC_MODES:
        raise InputError(f"{MALLOC_ENV}={mode!r}: expected one of {', '.join(MALLOC_MODES)}")
    return mode


def keep_freed_memory() -> bool:
    """Sets glibc's malloc to keep freed memory; False where the C library is not glibc or tcmalloc is loaded."""
    if "tcmalloc" in os.environ.get("LD_PRELOAD", "") or os.name != "posix":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # only glibc has it: musl or macOS take no tuning here
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all([bool(mallopt(param, value)) for param, value in _SETTINGS])
