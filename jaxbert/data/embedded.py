"""The embedded corpus: Python's own documentation, which ships with every Python.

The language reference in `pydoc_data.topics` and the docstrings of the standard library's
modules, classes and functions. Nothing is downloaded and nothing is vendored.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sysconfig
from pathlib import Path
from typing import Iterator

from pydoc_data.topics import topics

_RULE_LINE = re.compile(r"^[ \t]*([*=\-~^#_])\1{2,}[ \t]*$", re.MULTILINE)  # reST underlines


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3"}
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        files += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    return files


_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _collect_docstrings(body: list, out: list[str]) -> None:
    """Docstrings of the definitions in a statement list, descending only through statements
    (if/try/with blocks and nested definitions), never into expressions: far faster than ast.walk."""
    for node in body:
        if isinstance(node, _DEFS):
            doc = ast.get_docstring(node)
            if doc and doc.strip():
                out.append(doc.strip())
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], (ast.stmt, ast.excepthandler)):
                _collect_docstrings(block, out)


def _docstrings(path: Path) -> str:
    """Module, class and function docstrings of one source file, in source order."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return ""
    doc = ast.get_docstring(tree)
    out = [doc.strip()] if doc and doc.strip() else []
    _collect_docstrings(tree.body, out)
    return "\n".join(out)


def documented_objects() -> Iterator[tuple[str, str, str, str]]:
    """(module, qualified name, kind, docstring) for every documented module, class and function of
    the standard library, kind being "module", "class" or "function": labels nobody annotated, read
    from the source itself. In file order, then source order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        doc = ast.get_docstring(tree)
        if doc and doc.strip():
            yield module, module, "module", doc.strip()
        yield from _documented(tree.body, module, "")


def _documented(body: list, module: str, prefix: str) -> Iterator[tuple[str, str, str, str]]:
    for node in body:
        if isinstance(node, _DEFS):
            name = prefix + node.name
            doc = ast.get_docstring(node)
            if doc and doc.strip():
                yield module, name, "class" if isinstance(node, ast.ClassDef) else "function", doc.strip()
            yield from _documented(node.body, module, name + ".")
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block and isinstance(block[0], (ast.stmt, ast.excepthandler)):
                    yield from _documented(block, module, prefix)


def default_documents() -> Iterator[tuple[str, str, int]]:
    """(source name, document, progress units) for every document of the embedded corpus."""
    for name in sorted(topics):
        yield "pydoc_data.topics", _RULE_LINE.sub("", topics[name]), len(topics[name])
    for path in _stdlib_files():
        doc, nbytes = _cached_docstrings(path)
        yield "stdlib docstrings", doc, nbytes


@functools.lru_cache(maxsize=None)
def _cached_docstrings(path: Path) -> tuple[str, int]:
    """Parsing the stdlib takes seconds; a process that reads the corpus twice (train a
    tokenizer, then prepare) parses it once. About 2 MB of text is kept."""
    return _docstrings(path), path.stat().st_size


def default_corpus_size() -> int:
    """Progress units of the embedded corpus (topic characters plus stdlib source bytes)."""
    return sum(map(len, topics.values())) + sum(p.stat().st_size for p in _stdlib_files())
