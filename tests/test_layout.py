"""The package's shape: imports point down the layers, no cycles, no hidden imports, one owner of the workdir format."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jaxbert
from jaxbert.model.heads import MODEL_CLASSES
from jaxbert.model.registry import HEADS

ROOT = Path(jaxbert.__file__).parent
# Layers, bottom first: a module imports only from layers below its own (and its own subpackage);
# pretraining (train) and fine-tuning (finetune) are two users of the engine, neither above the other.
RANK = {"errors": 0, "fs": 1, "terminal": 1, "devices": 1, "model": 2, "workdir": 3, "convert": 4, "data": 5,
        "infer": 6, "engine": 7, "train": 8, "finetune": 8, "parity": 9, "bench": 9, "cli": 10}
# Optional dependencies (extras), and `resource`, which only POSIX systems have.
OPTIONAL = {"torch", "transformers", "matplotlib", "pyarrow", "tensorflow", "resource", "fsspec", "gcsfs"}


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path):
    """(imported dotted name, line, inside a function or class?) for every import statement."""
    tree = ast.parse(path.read_text(), str(path))
    nested = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from jaxbert.x import y` may name a submodule y
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            yield name, node.lineno, id(node) in nested


def _target(name: str, modules: dict) -> str | None:
    """The package module an imported name refers to (longest match), or None if outside jaxbert."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _graph():
    modules = _modules()
    edges, problems = {m: set() for m in modules}, []
    for module, path in modules.items():
        for name, line, nested in _imports(path):
            target = _target(name, modules)
            where = f"{path.relative_to(ROOT.parent)}:{line}"
            if target is None:
                if nested and name.split(".")[0] not in OPTIONAL:
                    problems.append(f"{where}: imports {name} inside a function (not an optional dependency)")
                continue
            if nested:
                problems.append(f"{where}: imports {name} inside a function")
            if target == module:
                continue
            edges[module].add(target)
            src, dst = _layer(module), _layer(target)
            if dst == "":
                problems.append(f"{where}: imports the package root `jaxbert` from inside it")
            elif src not in ("", "configs") and src != dst and RANK[dst] >= RANK[src]:
                problems.append(f"{where}: {src}/ imports {name} ({dst}/ is not below {src}/)")
    return modules, edges, problems


def test_imports_point_down_and_none_hide_in_functions():
    _, _, problems = _graph()
    assert problems == []


def test_no_import_cycles():
    modules, edges, _ = _graph()
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(modules):
        if m not in state:
            visit(m)
    assert cycles == []


# The workdir format's names: only jaxbert/workdir.py spells them; every other module goes through it.
WORKDIR_NAMES = ('"recipe.yaml"', '"meta"', '"checkpoints"', '"checkpoints.corrupt"', '"metrics.jsonl"',
                 '"curves.png"', '"fill_mask.txt"')


def _workdir_spellings(text: str) -> list[str]:
    return [name for name in WORKDIR_NAMES if name in text or name.replace('"', "'") in text]


def test_one_module_owns_the_workdir_format():
    owner = ROOT / "workdir.py"
    assert _workdir_spellings(owner.read_text())  # the owner spells them (else this test checks nothing)
    others = {str(p.relative_to(ROOT.parent)): found for p in sorted(ROOT.rglob("*.py"))
              if p != owner and (found := _workdir_spellings(p.read_text()))}
    assert others == {}


def test_the_owner_check_sees_a_path_spelt_by_hand():
    assert _workdir_spellings('meta = json.loads((root / str(step) / "meta" / "metadata").read_text())') == \
        ['"meta"']
    assert _workdir_spellings("path = workdir / 'recipe.yaml'") == ['"recipe.yaml"']
    assert _workdir_spellings("x = 'checkpoint'") == []


def test_the_checker_sees_a_violation(tmp_path):
    """The walk above would catch an upward import, a hidden import and a cycle."""
    modules = {"jaxbert.model.a": tmp_path / "a.py", "jaxbert.train.b": tmp_path / "b.py"}
    modules["jaxbert.model.a"].write_text("import jaxbert.train.b\ndef f():\n    import numpy\n")
    found = list(_imports(modules["jaxbert.model.a"]))
    assert ("jaxbert.train.b", 1, False) in found and ("numpy", 3, True) in found
    assert _target("jaxbert.train.b.thing", modules) == "jaxbert.train.b"
    assert RANK[_layer("jaxbert.train.b")] > RANK[_layer("jaxbert.model.a")]


def test_registry_describes_every_model_class():
    assert set(MODEL_CLASSES) == set(HEADS)
    for name, spec in HEADS.items():
        assert spec.name == name
        assert spec.prefix == ("" if spec.base else spec.family.prefix + ".")


# Family flags: only the family modules (jaxbert/model/families/) and a family's own folder may ask
# which family a config is; everything else asks the registry (jaxbert.model.families.family_of).
FAMILY_FLAG = re.compile(r"\bis_modernbert\b|\bis_roberta\b|\bmodel_type\s*==")
FAMILY_HOMES = ("model/families/", "model/modernbert/")


def _family_flags(text: str) -> list[str]:
    return [m.group(0) for m in FAMILY_FLAG.finditer(text)]


def test_no_family_flag_outside_the_family_modules():
    assert _family_flags((ROOT / "model" / "modernbert" / "__init__.py").read_text())  # the pattern finds one
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(FAMILY_HOMES):
            continue
        flags = _family_flags(path.read_text())
        if flags:
            found[rel] = flags
    assert found == {}
    assert _family_flags("if config.model_type == 'roberta':") == ["model_type =="]
    assert _family_flags("if modernbert.is_modernbert(config) or is_roberta:") == ["is_modernbert", "is_roberta"]
    assert _family_flags("model_type = data.get('model_type')") == []
