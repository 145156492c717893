"""README and docs/ point at files that exist: every test they name (`tests/x.py`, `tests/x.py::test_name`),
every package file (`jaxbert/...py`) and every docs page they link, so a moved or renamed test or page
leaves no dangling pointer behind (docs/extending.md tells a reader which test to copy)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TEST_REF = re.compile(r"(tests/[\w/*.-]+?\.py)(?:::(\w+))?")
PACKAGE_REF = re.compile(r"(jaxbert/[\w/]+\.py)")
DOC_LINK = re.compile(r"\]\(((?:docs/)?[\w-]+\.md)\)")


def _functions(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


def dangling(page: Path) -> list[str]:
    """The references of one page that point at nothing."""
    text, out = page.read_text(), []
    for file, name in TEST_REF.findall(text):
        matches = sorted(REPO.glob(file))
        if not matches:
            out.append(file)
        elif name and not any(name in _functions(m) for m in matches):
            out.append(f"{file}::{name}")
    out += [f for f in PACKAGE_REF.findall(text) if not (REPO / f).exists() and "NAME" not in f]
    out += [link for link in DOC_LINK.findall(text) if not (page.parent / link).exists()]
    return out


def test_readme_and_docs_name_only_tests_files_and_pages_that_exist():
    found = {page.relative_to(REPO).as_posix(): dangling(page) for page in PAGES}
    assert {k: v for k, v in found.items() if v} == {}
    assert any(TEST_REF.search(p.read_text()) for p in PAGES)  # the pattern sees the references it checks


def test_the_check_catches_a_renamed_test(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("copy `tests/test_layout.py::test_gone_away` and `tests/nowhere.py`; see [a](missing.md); "
                    "`jaxbert/model/families/spec.py` exists, `jaxbert/model/families/NAME.py` is a pattern")
    assert dangling(page) == ["tests/test_layout.py::test_gone_away", "tests/nowhere.py", "missing.md"]
