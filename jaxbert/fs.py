"""Paths and safe writes: one place for "where does this go" and "how is it published".

Every path a user passes may be a local path or a URL (gs://...); ``as_path`` turns
either into an ``etils.epath.Path``. Writes never lose data:

- ``atomic_write_text`` / ``atomic_write_bytes``: a temporary sibling, then a rename.
- ``publish_dir``: a verb that writes a directory builds it in a temporary sibling and
  swaps it in only when complete. An existing destination is replaced only when it is
  recognisably jaxbert's own output of the same kind (its ``.jaxbert-output`` marker,
  which lists the entries jaxbert wrote there) and ``overwrite`` is set, and only when it
  holds nothing else: a file or folder added beside jaxbert's (notes, a training workdir)
  is refused by name, never deleted.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import json
import logging
import os
from pathlib import Path
import shutil
import tempfile
from typing import Iterator, Union
import uuid

from etils import epath

from jaxbert.errors import InputError

PathLike = Union[str, os.PathLike, epath.Path]
MARKER = ".jaxbert-output"
URL_SCHEMES = ("gs", "s3", "az", "hf")  # what etils.epath reaches through fsspec


def as_path(p: PathLike) -> epath.Path:
    """A local path or URL as an epath.Path (local paths made absolute).

    A URL's scheme must be one etils.epath reaches (gs, s3, az, hf; file:// is local), and
    its bucket must exist: otherwise InputError naming the URL, before anything is written.
    """
    if isinstance(p, epath.Path):
        return p
    s = os.fspath(p)
    if "://" in s:
        scheme, _, rest = s.partition("://")
        if scheme == "file":
            return epath.Path(os.path.abspath(rest))
        if scheme not in URL_SCHEMES:
            raise InputError(f"{s}: unknown URL scheme {scheme}:// (jaxbert reads and writes local paths and "
                             f"{', '.join(x + '://' for x in URL_SCHEMES)})")
        _check_bucket(scheme, rest.split("/", 1)[0])
        return epath.Path(s)
    return epath.Path(os.path.abspath(os.path.expanduser(s)))


def is_url(p: PathLike) -> bool:
    return "://" in os.fspath(p)


def _tmp_sibling(path: epath.Path, tag: str) -> epath.Path:
    return path.parent / f".{path.name}.{tag}-{uuid.uuid4().hex[:8]}"


def atomic_write_bytes(path: PathLike, data: bytes) -> epath.Path:
    """Write data to path through a temporary sibling and a rename."""
    path = as_path(path)
    if is_url(path):  # one object write is atomic on a bucket; a rename there is a copy
        path.write_bytes(data)
        return path
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


def check_new_file(path: PathLike, flag: str, overwrite: bool = False, ours=None) -> epath.Path:
    """A report file a verb is about to write, checked before the work: its folder must exist, and
    a file already there is refused, naming it (the verb did not make it, and does not replace it).

    With `overwrite`, a file that `ours(path)` recognises as an earlier report of this verb may be
    replaced; anything else there is still refused. `ours` None: the verb has no --overwrite.
    """
    p = as_path(path)
    parent = p.parent
    if not is_url(p):
        if not parent.exists():
            raise InputError(f"{flag} {p}: its folder {parent} does not exist; make it first or give another path")
        if not parent.is_dir():
            raise InputError(f"{flag} {p}: {parent} is not a folder")
        if p.is_dir():
            raise InputError(f"{flag} {p}: is a folder; give a file path")
    if not p.exists():
        return p
    if ours is None:
        raise InputError(f"{flag} {p}: exists; give a path that does not, or remove it first")
    if not overwrite:
        raise InputError(f"{flag} {p}: exists; give a path that does not, or pass --overwrite to replace "
                         f"an earlier report of this verb")
    try:
        recognised = bool(ours(p))
    except (OSError, ValueError):
        recognised = False
    if not recognised:
        raise InputError(f"{flag} {p}: exists and is not a file this verb wrote; --overwrite replaces only "
                         f"those: give another path")
    return p


def json_report_of(*keys: str):
    """A recogniser for check_new_file: a JSON object holding every one of `keys` (what a verb's
    --json report holds); anything else (a note, another verb's report) is not ours."""
    def ours(path) -> bool:
        try:
            found = json.loads(as_path(path).read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return False
        return isinstance(found, dict) and all(k in found for k in keys)
    return ours


def _marker(path: PathLike) -> dict | None:
    try:
        found = json.loads((as_path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def output_kind(path: PathLike) -> str | None:
    """The kind jaxbert recorded when it published this directory, or None."""
    return (_marker(path) or {}).get("kind")


def written_entries(path: PathLike) -> set[str] | None:
    """The top-level names jaxbert wrote into a published directory (its marker lists them), or
    None for a marker from before the list was kept."""
    files = (_marker(path) or {}).get("files")
    return set(files) if isinstance(files, list) else None


def enclosing_output(path: PathLike) -> tuple[epath.Path, str] | None:
    """(folder, kind) of the nearest jaxbert output that is `path` or holds it, or None."""
    p = as_path(path)
    for folder in (p, *p.parents):
        kind = output_kind(folder)
        if kind is not None:
            return folder, kind
        if os.fspath(folder.parent) == os.fspath(folder):
            break
    return None


def _marker_text(kind: str, files, complete: bool = True) -> str:
    record = {"kind": kind, "files": sorted(files)}
    if not complete:
        record["complete"] = False
    return json.dumps(record) + "\n"


def _real(p: epath.Path) -> str:
    s = os.fspath(p)
    return s.rstrip("/") if is_url(s) else os.path.realpath(s)


def _same_or_inside(a: epath.Path, b: epath.Path) -> bool:
    a, b = _real(a), _real(b)
    return a == b or a.startswith(b.rstrip("/") + "/")


def check_apart(dst: PathLike, src: PathLike, dst_flag: str, src_flag: str) -> None:
    """InputError when dst is src, holds it, or (src a folder) lies inside it: a run written there
    would mix with, or replace, what it reads."""
    if src is None or dst is None or is_url(src) != is_url(dst):
        return
    dst_p, src_p = as_path(dst), as_path(src)
    a, b = _real(dst_p), _real(src_p)
    if a == b:
        how = "is"
    elif b.startswith(a.rstrip("/") + "/"):
        how = "holds"
    elif src_p.is_dir() and a.startswith(b.rstrip("/") + "/"):
        how = "is inside"
    else:
        return
    raise InputError(f"{dst_flag} {dst_p} {how} {src_flag} {src_p}; a run there would mix with what it reads "
                     f"(and could replace it): choose a {dst_flag} outside it")


def _entries(folder: epath.Path) -> list[str]:
    """The names in a folder; on a bucket listed afresh (another client may have added files, and
    epath's listing cache would hide them)."""
    if not is_url(folder):
        return sorted(e.name for e in folder.iterdir())
    filesystem_, remote = filesystem(folder)
    filesystem_.invalidate_cache()
    return sorted({p.rstrip("/").rsplit("/", 1)[-1] for p in filesystem_.ls(remote, detail=False)})


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
    entries = _entries(dst)
    if not entries:
        return dst
    found = output_kind(dst)
    if found != kind:
        what = f"a jaxbert {found} output" if found else f"files jaxbert did not write ({', '.join(entries[:3])})"
        raise InputError(f"{dst}: holds {what}; refusing to replace it with a {kind} output")
    ours = written_entries(dst)
    if ours is None:  # a marker from before the list: jaxbert's outputs never held a folder
        extra = [e for e in entries if e != MARKER and (dst / e).is_dir()]
    else:
        extra = [e for e in entries if e != MARKER and e not in ours]
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise InputError(f"{dst}: holds a jaxbert {kind} output and {len(extra)} entr"
                         f"{'y' if len(extra) == 1 else 'ies'} jaxbert did not write there ({shown}); refusing "
                         f"to replace it: move them out, or choose a new destination")
    if not overwrite and is_complete(dst):  # an interrupted publish may be redone
        raise InputError(f"{dst}: holds an earlier jaxbert {kind} output; pass --overwrite to replace it "
                         "(or choose a new destination)")
    return dst


@contextlib.contextmanager
def publish_dir(dst: PathLike, kind: str, overwrite: bool = False, sources: tuple = ()) -> Iterator[epath.Path]:
    """Yield a temporary sibling of dst to fill; on success it becomes dst (marked as `kind`).

    On an exception the temporary directory is removed and dst is untouched.
    """
    dst = check_destination(dst, kind, overwrite, sources)
    if is_url(dst):
        with _publish_remote(dst, kind) as tmp:
            yield tmp
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(dst, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        (tmp / MARKER).write_text(_marker_text(kind, (e.name for e in tmp.iterdir() if e.name != MARKER)))
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


# --- URLs (gs://...): no rename on a bucket, so a marker says when a directory is complete ---

def is_complete(path: PathLike) -> bool:
    """False only while (or after an interrupted) publish of a URL directory: its marker says so."""
    marker = as_path(path) / MARKER
    try:
        return json.loads(marker.read_text()).get("complete", True) is not False
    except (OSError, ValueError, AttributeError):
        return True  # no marker: not jaxbert's output, nothing to wait for


def require_complete(path: PathLike) -> epath.Path:
    """path as a Path; InputError when it is a jaxbert output whose publishing did not finish."""
    path = as_path(path)
    if not is_complete(path):
        raise InputError(f"{path}: an unfinished jaxbert output (its {MARKER} says incomplete); write it again")
    return path


def filesystem(path: PathLike):
    """(fsspec filesystem, path string) behind a URL or a local path."""
    import fsspec
    s = os.fspath(as_path(path))
    return fsspec.core.url_to_fs(s)


def expand(url: str) -> list[str]:
    """The URLs a glob pattern (gs://b/corpus/*.parquet) matches, sorted; InputError for none."""
    if not glob.has_magic(url):
        return [url]
    filesystem_, pattern = filesystem(url)
    protocol = url.split("://", 1)[0]
    matches = sorted(f"{protocol}://{m}" for m in filesystem_.glob(pattern))
    if not matches:
        raise InputError(f"no files match {url!r}")
    return matches


def local_copy(path: PathLike) -> Path:
    """A local path holding what `path` holds: itself when local, else a copy (file or directory)
    downloaded once per process into a temporary folder removed at exit."""
    path = require_complete(path) if is_url(path) else as_path(path)
    if not is_url(path):
        return Path(os.fspath(path))
    key = os.fspath(path)
    if key not in _DOWNLOADS:
        fs, remote = filesystem(path)
        fs.invalidate_cache()
        if not fs.exists(remote):
            raise FileNotFoundError(f"{key} does not exist")
        root = Path(tempfile.mkdtemp(prefix="jaxbert-download-"))
        atexit.register(shutil.rmtree, root, True)
        local = root / (path.name or "root")
        if fs.isdir(remote):
            local.mkdir()
            fs.get(remote.rstrip("/") + "/", str(local) + "/", recursive=True)
        else:
            fs.get(remote, str(local))
        _DOWNLOADS[key] = local
    return _DOWNLOADS[key]


_DOWNLOADS: dict[str, Path] = {}


def upload(local: PathLike, dst: PathLike) -> epath.Path:
    """Copy a local file or directory to dst (a URL or a local path)."""
    dst, local = as_path(dst), os.fspath(local)
    fs, remote = filesystem(dst)
    if os.path.isdir(local):
        fs.put(local.rstrip("/") + "/", remote.rstrip("/") + "/", recursive=True)
    else:
        fs.put(local, remote)
    return dst


@contextlib.contextmanager
def _publish_remote(dst: epath.Path, kind: str) -> Iterator[epath.Path]:
    """publish_dir for a URL: fill a local folder, upload it under a temporary prefix, then copy it
    into dst between an 'incomplete' marker and the final one (readers check it)."""
    local = Path(tempfile.mkdtemp(prefix="jaxbert-publish-"))
    try:
        yield epath.Path(local)
        new = [e.name for e in local.iterdir() if e.name != MARKER]
        old_entries = written_entries(dst) or set()
        fs, remote = filesystem(dst)
        staging = os.fspath(_tmp_sibling(dst, "tmp"))
        _, staging_remote = filesystem(staging)
        fs.put(str(local) + "/", staging_remote + "/", recursive=True)  # the slow part: dst untouched
        try:
            # while incomplete, the marker lists the old entries and the new: a redo may replace both
            (dst / MARKER).write_text(_marker_text(kind, old_entries | set(new), complete=False))
            fs.invalidate_cache()
            for old in fs.find(remote):
                if not old.endswith("/" + MARKER):
                    fs.rm(old)
            fs.copy(staging_remote + "/", remote + "/", recursive=True)
            (dst / MARKER).write_text(_marker_text(kind, new))
        finally:
            fs.rm(staging_remote, recursive=True)
    finally:
        shutil.rmtree(local, ignore_errors=True)


@functools.lru_cache(maxsize=None)
def _check_bucket(scheme: str, bucket: str) -> None:
    if scheme == "hf":
        return
    try:
        import fsspec
        fs = fsspec.filesystem(scheme)
    except (ImportError, ValueError) as e:
        hint = "pip install gcsfs" if scheme == "gs" else f"install fsspec's {scheme} backend"
        raise InputError(f"{scheme}:// paths need fsspec's {scheme} backend: {hint} ({e})") from None
    try:
        with _quiet("gcsfs"):  # it logs each retry with a traceback; the InputError below says it once
            found = fs.exists(bucket)
    except Exception as e:  # noqa: BLE001 - no network, no credentials, ...: one line naming the bucket
        raise InputError(f"{scheme}://{bucket}: cannot reach the bucket ({type(e).__name__}: {e})") from None
    if not found:
        raise InputError(f"{scheme}://{bucket}: no such bucket, or no permission to read it")


@contextlib.contextmanager
def _quiet(logger_name: str):
    logger = logging.getLogger(logger_name)
    level, logger.level = logger.level, logging.CRITICAL
    try:
        yield
    finally:
        logger.setLevel(level)
