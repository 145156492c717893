"""Multi-host checks: every process of a run must see the same workdir.

On a pod each host has its own local disk. A run whose workdir is such a local path
would write one part of every checkpoint on each host and could never resume; it
would only find out at the first save, hours in. ``check_shared_workdir`` finds out
at start: process 0 writes a random token into the workdir, every process reads it
back, and all of them stop together, with the same message, when any cannot.

The token and the answers travel through the key-value store of JAX's coordination
service (the one ``jax.distributed.initialize`` starts), not through a device
collective: a collective this early would set up the cross-host CPU transport while
the hosts are still at uneven points of their start-up.
"""

from __future__ import annotations

import itertools
import json
import secrets

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax._src import distributed  # the coordination service's client; no public handle yet

from jaxbert import fs
from jaxbert.errors import InputError

TOKEN_NAME = ".jaxbert-shared-check"
TIMEOUT_MS = 10 * 60 * 1000  # hosts of a pod may start minutes apart
_CHECKS = itertools.count()  # one key prefix per check in this process's session


class WorkdirNotShared(InputError):
    """The processes of a multi-host run do not see one and the same workdir."""


def check_shared_workdir(workdir) -> None:
    """Raise WorkdirNotShared on every process unless all read back process 0's token."""
    if jax.process_count() == 1:
        return
    client = distributed.global_state.client
    me, n = jax.process_index(), jax.process_count()
    workdir = fs.as_path(workdir)
    path = workdir / TOKEN_NAME
    prefix = f"jaxbert/workdir-check/{next(_CHECKS)}"
    if me == 0:
        token = secrets.token_hex(16)
        workdir.mkdir(parents=True, exist_ok=True)
        fs.atomic_write_text(path, token)
        client.key_value_set(f"{prefix}/token", token)
    token = client.blocking_key_value_get(f"{prefix}/token", TIMEOUT_MS)
    client.key_value_set(f"{prefix}/seen/{me}", "1" if _read_token(path) == token else "0")
    seen = [client.blocking_key_value_get(f"{prefix}/seen/{i}", TIMEOUT_MS) == "1" for i in range(n)]
    if me == 0:
        try:
            path.unlink()
        except OSError:
            pass
    if not all(seen):
        missing = [i for i, ok in enumerate(seen) if not ok]
        raise WorkdirNotShared(
            f"workdir {workdir} is not shared between the hosts of this run: process(es) {missing} cannot read "
            f"the token process 0 wrote there. Give every host the same bucket URL (--workdir gs://...) or a "
            f"filesystem all of them mount")


def _read_token(path) -> str | None:
    try:
        filesystem, key = fs.filesystem(path)
        filesystem.invalidate_cache()  # another process wrote it: no cached listing may hide it
        return filesystem.cat_file(key).decode().strip()
    except (OSError, ValueError):
        return None


def align(name: str) -> None:
    """Wait until every process gets here (a coordination-service barrier, no device collective).

    On CPU the cross-process transport (gloo) gives up when a peer is more than about half a
    minute late to a collective; hosts that compile at uneven speed meet here first.
    """
    if jax.process_count() == 1:
        return
    distributed.global_state.client.wait_at_barrier(f"jaxbert/{name}/{next(_CHECKS)}", TIMEOUT_MS)


def compiled_then_aligned(fn, name: str):
    """fn (a jitted or pmapped function) whose first call compiles ahead, waits for every process
    (align), then runs; single-process runs get fn itself."""
    if jax.process_count() == 1:
        return fn
    compiled = None

    def call(*args):
        nonlocal compiled
        if compiled is None:
            compiled = fn.lower(*args).compile()
            align(f"compiled-{name}")
        return compiled(*args)
    return call


def allgather_json(value) -> list:
    """Every process's JSON-able `value`, in process order."""
    if jax.process_count() == 1:
        return [json.loads(json.dumps(value, default=int))]
    data = np.frombuffer(json.dumps(value, default=int).encode(), np.uint8)
    n = int(np.max(multihost_utils.process_allgather(np.array([data.size]))))
    rows = multihost_utils.process_allgather(np.pad(data, (0, n - data.size), constant_values=32))
    return [json.loads(bytes(r).decode()) for r in np.asarray(rows).reshape(jax.process_count(), n)]


def barrier(name: str) -> None:
    """A device collective every process meets (multihost_utils.sync_global_devices)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"jaxbert-{name}")
