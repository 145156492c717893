"""Multi-host checks: every process of a run must see the same workdir.

On a pod each host has its own local disk. A run whose workdir is such a local path
would write one part of every checkpoint on each host and could never resume; it
would only find out at the first save, hours in. ``check_shared_workdir`` finds out
at start: process 0 writes a random token into the workdir, every process reads it
back, and all of them stop together, with the same message, when any cannot.
"""

from __future__ import annotations

import secrets

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxbert import fs
from jaxbert.errors import InputError

TOKEN_NAME = ".jaxbert-shared-check"


class WorkdirNotShared(InputError):
    """The processes of a multi-host run do not see one and the same workdir."""


def check_shared_workdir(workdir) -> None:
    """Raise WorkdirNotShared on every process unless all read back process 0's token."""
    if jax.process_count() == 1:
        return
    workdir = fs.as_path(workdir)
    token = np.frombuffer(secrets.token_bytes(16), np.uint8)
    token = np.asarray(multihost_utils.broadcast_one_to_all(token))  # process 0's token, everywhere
    path = workdir / TOKEN_NAME
    if jax.process_index() == 0:
        workdir.mkdir(parents=True, exist_ok=True)
        fs.atomic_write_text(path, token.tobytes().hex())
    multihost_utils.sync_global_devices("jaxbert-workdir-token-written")
    seen = _read_token(path) == token.tobytes().hex()
    everyone = np.asarray(multihost_utils.process_allgather(np.array([seen])))
    multihost_utils.sync_global_devices("jaxbert-workdir-token-read")
    if jax.process_index() == 0:
        try:
            path.unlink()
        except OSError:
            pass
    if not everyone.all():
        missing = [int(i) for i in np.flatnonzero(~everyone.reshape(-1))]
        raise WorkdirNotShared(
            f"workdir {workdir} is not shared between the hosts of this run: process(es) {missing} cannot read "
            f"the token process 0 wrote there. Give every host the same bucket URL (--workdir gs://...) or a "
            f"filesystem all of them mount")


def _read_token(path) -> str | None:
    if fs.is_url(path):  # another process wrote it: skip this process's cached listings
        fs.filesystem(path)[0].invalidate_cache()
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return None

