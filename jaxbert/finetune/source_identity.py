"""Which model a fine-tuning workdir was trained from: SRC's resolved path and a fingerprint of what
it holds, recorded with every checkpoint so that a resume from another model (or from the same
path after its files changed) is refused instead of reporting the earlier model's result.

The fingerprint is cheap whatever the model's size: a hash of config.json, and of each weight
file's name, size and first and last MiB (a safetensors header, which lists every tensor, is in
its first MiB; trained weights differ there and at the end). A pretraining workdir is fingerprinted
by its recorded config and newest checkpoint step, as `from_pretrained` reads that step.
"""

from __future__ import annotations

import hashlib
import json
import os

from jaxbert import fs
from jaxbert import workdir as workdir_lib

# The record keys (jaxbert.finetune.loop's task record holds them beside the task's own).
KEYS = ("source", "source_fingerprint")
_SAMPLE = 1 << 20  # bytes read at each end of a weight file
_WEIGHTS = (".safetensors", ".bin", ".msgpack", ".h5", ".index", ".index.json", ".data-00000-of-00001", ".pt",
            ".pth", ".ckpt")


def resolved(source) -> str:
    """SRC as one spelling: a URL as given, a local path made absolute with symlinks resolved."""
    return os.fspath(source) if fs.is_url(source) else os.path.realpath(os.fspath(source))


def source_identity(source) -> dict:
    """{"source": resolved path, "source_fingerprint": 16 hex digits} of a fine-tuning source."""
    return {"source": resolved(source), "source_fingerprint": _fingerprint(source)}


def _fingerprint(source) -> str:
    h = hashlib.sha256()
    p = fs.as_path(source)
    if workdir_lib.is_workdir(p):
        h.update(json.dumps(workdir_lib.recorded_config(p), sort_keys=True).encode())
        steps = [int(c.name) for c in (p / workdir_lib.CHECKPOINTS).iterdir() if c.name.isdigit()]
        h.update(f"checkpoint {max(steps) if steps else None}".encode())
        return h.hexdigest()[:16]
    folder = p if p.is_dir() else p.parent
    for f in sorted(folder.iterdir(), key=lambda f: f.name):
        if not f.is_file() or not (p.is_dir() or f.name.startswith(p.name) or f.name == "config.json"):
            continue
        if f.name == "config.json":
            h.update(b"config.json\0" + f.read_bytes())
        elif f.name.endswith(_WEIGHTS):
            h.update(f"{f.name}\0{_sampled(f)}\n".encode())
    return h.hexdigest()[:16]


def _sampled(f) -> str:
    """A weight file's size and a hash of its first and last MiB."""
    st = f.stat()
    size = getattr(st, "st_size", getattr(st, "length", 0))  # a local os.stat_result, or a URL's StatResult
    h = hashlib.sha256(str(size).encode())
    with f.open("rb") as stream:
        h.update(stream.read(_SAMPLE))
        if size > _SAMPLE:
            stream.seek(max(_SAMPLE, size - _SAMPLE))
            h.update(stream.read(_SAMPLE))
    return h.hexdigest()
