"""Paths and safe writes: one place for "where does this go" and "how is it published".

Every path a user passes may be a local path or a URL (gs://...); ``as_path`` turns
either into an ``etils.epath.Path``. Writes never lose data:

- ``atomic_write_text`` / ``atomic_write_bytes``: a temporary sibling, then a rename.
- ``publish_dir``: a verb that writes a directory builds it in a temporary sibling and
  swaps it in only when complete. An existing destination is replaced only when it is
  recognisably jaxbert's own output of the same kind (its ``.jaxbert-output`` marker)
  and ``overwrite`` is set; a destination holding anything else is refused by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Iterator, Union

from etils import epath

from jaxbert.errors import InputError

PathLike = Union[str, os.PathLike, epath.Path]
MARKER = ".jaxbert-output"


def as_path(p: PathLike) -> epath.Path:
    """A local path or URL as an epath.Path (local paths made absolute)."""
    if isinstance(p, epath.Path):
        return p
    s = os.fspath(p)
    if "://" in s:
        return epath.Path(s)
    return epath.Path(os.path.abspath(os.path.expanduser(s)))


def is_url(p: PathLike) -> bool:
    return "://" in os.fspath(p)


def _tmp_sibling(path: epath.Path, tag: str) -> epath.Path:
    return path.parent / f".{path.name}.{tag}-{uuid.uuid4().hex[:8]}"


def atomic_write_bytes(path: PathLike, data: bytes) -> epath.Path:
    """Write data to path through a temporary sibling and a rename."""
    path = as_path(path)
    tmp = _tmp_sibling(path, "tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_text(path: PathLike, text: str) -> epath.Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def output_kind(path: PathLike) -> str | None:
    """The kind jaxbert recorded when it published this directory, or None."""
    marker = as_path(path) / MARKER
    try:
        return json.loads(marker.read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def _real(p: epath.Path) -> str:
    s = os.fspath(p)
    return s.rstrip("/") if is_url(s) else os.path.realpath(s)


def _same_or_inside(a: epath.Path, b: epath.Path) -> bool:
    a, b = _real(a), _real(b)
    return a == b or a.startswith(b.rstrip("/") + "/")


def check_destination(dst: PathLike, kind: str, overwrite: bool = False, sources: tuple = ()) -> epath.Path:
    """Raise InputError unless dst may receive a new `kind` output; return it as a Path."""
    dst = as_path(dst)
    for src in sources:
        if src is None:
            continue
        src = as_path(src)
        if _same_or_inside(dst, src) or _same_or_inside(src, dst):
            raise InputError(f"{dst}: the destination overlaps the source {src}; choose another destination")
    if not dst.exists():
        return dst
    if not dst.is_dir():
        raise InputError(f"{dst}: exists and is not a directory; refusing to replace it")
    entries = sorted(e.name for e in dst.iterdir())
    if not entries:
        return dst
    found = output_kind(dst)
    if found != kind:
        what = f"a jaxbert {found} output" if found else f"files jaxbert did not write ({', '.join(entries[:3])})"
        raise InputError(f"{dst}: holds {what}; refusing to replace it with a {kind} output")
    if not overwrite:
        raise InputError(f"{dst}: holds an earlier jaxbert {kind} output; pass --overwrite to replace it "
                         "(or choose a new destination)")
    return dst


@contextlib.contextmanager
def publish_dir(dst: PathLike, kind: str, overwrite: bool = False, sources: tuple = ()) -> Iterator[epath.Path]:
    """Yield a temporary sibling of dst to fill; on success it becomes dst (marked as `kind`).

    On an exception the temporary directory is removed and dst is untouched.
    """
    dst = check_destination(dst, kind, overwrite, sources)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(dst, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        (tmp / MARKER).write_text(json.dumps({"kind": kind}) + "\n")
        old = None
        if dst.exists():
            old = _tmp_sibling(dst, "old")
            dst.rename(old)
        tmp.rename(dst)
        if old is not None:
            old.rmtree()
    except BaseException:
        if tmp.exists():
            tmp.rmtree()
        raise
