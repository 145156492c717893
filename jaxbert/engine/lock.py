"""One `jaxbert train` per workdir: a lock file, held for the run, released on exit.

The lock is ``fcntl.flock`` on WORKDIR/.jaxbert-train.lock, so the kernel drops it
when its process dies, however it dies. The file records ``pid host``; a record
left by a process that is gone (a crash, SIGKILL) is a stale lock, taken over with a
message. Local files only: on a URL workdir (gs://...) there is no lock, and the
run says so; keep one writer per bucket path yourself there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
import socket
from typing import Callable, Iterator

from jaxbert.errors import InputError
from jaxbert.fs import is_url

LOCK_NAME = ".jaxbert-train.lock"


class WorkdirBusy(InputError):
    """Another training run holds the workdir."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _holder(text: str) -> tuple[int | None, str]:
    parts = text.split()
    try:
        return int(parts[0]), (parts[1] if len(parts) > 1 else "")
    except (IndexError, ValueError):
        return None, ""


@contextlib.contextmanager
def workdir_lock(workdir, active: bool = True, log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold the workdir's lock for the block; raise WorkdirBusy when another run holds it."""
    if not active:
        yield
        return
    if is_url(workdir):
        log(f"{workdir}: not a local folder, so no lock guards it; run one `jaxbert train` on it at a time")
        yield
        return
    path = Path(workdir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, host = _holder(os.pread(fd, 200, 0).decode(errors="replace"))
            who = f"pid {pid} on {host}" if pid else "another process"
            raise WorkdirBusy(f"{workdir}: another `jaxbert train` ({who}) is using this workdir; "
                              "wait for it to end or choose another --workdir") from None
        pid, host = _holder(os.pread(fd, 200, 0).decode(errors="replace"))
        if pid is not None and pid != os.getpid():
            state = "no longer running" if host == socket.gethostname() and not _alive(pid) else "lock released"
            log(f"{path}: took over the stale lock of pid {pid} on {host or 'an unknown host'} ({state})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # released: an empty file is no stale lock
    finally:
        os.close(fd)  # closing drops the flock
