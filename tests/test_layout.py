"""The package's shape: imports point down the layers, no cycles, no hidden imports, one owner of the workdir format."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import jaxbert
from jaxbert.finetune import kinds
from jaxbert.model.bert.heads import MODEL_CLASSES
from jaxbert.model.registry import HEADS

ROOT = Path(jaxbert.__file__).parent
# Layers, bottom first: a module imports only from layers below its own (and its own subpackage);
# pretraining (train) and fine-tuning (finetune) are two users of the engine, neither above the other; the
# planner (plan) compiles train's step, so it sits above train (the train loop is handed it, not importing it).
RANK = {"errors": 0, "fs": 1, "terminal": 1, "devices": 1, "model": 2, "packaged": 2, "workdir": 3, "convert": 4,
        "data": 5, "infer": 6, "engine": 7, "train": 8, "finetune": 8, "plan": 8.5, "parity": 9, "bench": 9,
        "cli": 10}
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


# The workdir format's names: only jaxbert/workdir/layout.py spells them; every other module (its siblings in
# jaxbert/workdir/ too) goes through its constants.
WORKDIR_NAMES = ('"recipe.yaml"', '"meta"', '"checkpoints"', '"checkpoints.corrupt"', '"metrics.jsonl"',
                 '"curves.png"', '"fill_mask.txt"', '"eval.json"', '".jaxbert-workdir"', '".jaxbert-train.lock"')
# Names that are common words elsewhere ("hf" is also a --to format): caught where a path is joined with them.
WORKDIR_FOLDERS = ("downstream", "best", "hf")


def _workdir_spellings(text: str) -> list[str]:
    found = [name for name in WORKDIR_NAMES if name in text or name.replace('"', "'") in text]
    return found + [f'/ "{name}"' for name in WORKDIR_FOLDERS
                    if re.search(rf"/\s*[\"']{name}[\"']", text)]


def test_one_module_owns_the_workdir_format():
    owner = ROOT / "workdir" / "layout.py"
    assert _workdir_spellings(owner.read_text())  # the owner spells them (else this test checks nothing)
    others = {str(p.relative_to(ROOT.parent)): found for p in sorted(ROOT.rglob("*.py"))
              if p != owner and (found := _workdir_spellings(p.read_text()))}
    assert others == {}


def test_the_owner_check_sees_a_path_spelt_by_hand():
    assert _workdir_spellings('meta = json.loads((root / str(step) / "meta" / "metadata").read_text())') == \
        ['"meta"']
    assert _workdir_spellings("path = workdir / 'recipe.yaml'") == ['"recipe.yaml"']
    assert _workdir_spellings("x = 'checkpoint'") == []
    assert _workdir_spellings('where = root / "downstream" / spec.name') == ['/ "downstream"']
    assert _workdir_spellings('p.add_argument("--to", choices=("jaxbert", "hf"))') == []


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
FAMILY_HOMES = ("model/families/", "model/modernbert/", "model/eurobert/", "model/roberta/", "model/electra/",
                "model/deberta_v2/")


def _family_flags(text: str) -> list[str]:
    return [m.group(0) for m in FAMILY_FLAG.finditer(text)]


def test_no_family_flag_outside_the_family_modules():
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


# A family is a registered member, BERT too: nothing asks whether a family "builds on BERT" (it says
# which family it builds on), no module outside BERT's family entry spells BERT's param prefix, and a
# family's own modules are imported only inside its folder and by the registry (jaxbert/model/families/).
BERT_PREFIX = re.compile(r"""["']bert/""")
FAMILY_MODULES = {"jaxbert.model.modernbert": ("model/modernbert/", "model/families/"),
                  "jaxbert.model.eurobert": ("model/eurobert/", "model/families/"),
                  "jaxbert.model.roberta": ("model/roberta/", "model/families/"),
                  "jaxbert.model.electra": ("model/electra/", "model/families/"),
                  "jaxbert.model.deberta_v2": ("model/deberta_v2/", "model/families/")}


def _family_module_imports(rel: str, path: Path) -> list[str]:
    out = []
    for name, line, _ in _imports(path):
        for module, homes in FAMILY_MODULES.items():
            if (name == module or name.startswith(module + ".")) and not rel.startswith(homes):
                out.append(f"{rel}:{line}: imports {name}")
    return out


def test_families_are_registered_members_reached_through_the_registry(tmp_path):
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel, text = path.relative_to(ROOT).as_posix(), path.read_text()
        if "builds_on_bert" in text:
            found.append(f"{rel}: builds_on_bert")
        if rel != "model/families/bert.py" and BERT_PREFIX.search(text):
            found.append(f"{rel}: a 'bert/' literal")
        found += _family_module_imports(rel, path)
    assert found == []
    # the checks see what they look for
    assert BERT_PREFIX.search('loaded_flat = {f"bert/{k}": v}') and not BERT_PREFIX.search('"roberta/x"')
    sample = tmp_path / "x.py"
    sample.write_text("from jaxbert.model.modernbert.heads import ModernBertForMaskedLM\n")
    assert _family_module_imports("convert/x.py", sample) == ["convert/x.py:1: imports "
                                                              "jaxbert.model.modernbert.heads.ModernBertForMaskedLM"]
    assert _family_module_imports("model/families/x.py", sample) == []


# Registries instead of flags: a task kind's differences live in its module under
# jaxbert/finetune/kinds/, a model family's under jaxbert/model/families/ (ModernBERT's own modules
# in jaxbert/model/modernbert/, a family folder too); no other module branches on a kind's or a
# family's name.
KIND_BRANCHES = ("kind ==", "kind !=", "kind in (")
FAMILY_FLAGS = ("is_roberta", "model_type ==")
# Lines where `kind` names something other than a task kind, with what it names.
OTHER_KINDS = {
    ("data/corpus.py", 'for piece in ((doc,) if s is not None and s.kind == "text" else _bounded(doc)):'):
        "SourceStats.kind: an input file's format (text / jsonl / parquet), as the dataset's metadata records it",
}


def _branches(text: str, spellings, rel: str = "") -> list[str]:
    return [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if any(s in line for s in spellings) and (rel, line.strip()) not in OTHER_KINDS]


def test_no_module_branches_on_a_task_kind_or_a_model_family():
    kinds_dir = ROOT / "finetune" / "kinds"
    family_dirs = (ROOT / "model" / "families", ROOT / "model" / "modernbert")
    kind_branches, family_flags = [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel, text = str(path.relative_to(ROOT)), path.read_text()
        in_family = any(d in path.parents for d in family_dirs)
        if kinds_dir not in path.parents and not in_family:  # a family's own `kind`s are its param and layer kinds
            kind_branches += _branches(text, KIND_BRANCHES, rel)
        if not in_family:
            family_flags += _branches(text, FAMILY_FLAGS, rel)
    assert kind_branches == [] and family_flags == []
    # every exempted line still exists (else the exemption hides nothing and goes)
    for rel, line in OTHER_KINDS:
        assert line in (ROOT / rel).read_text(), (rel, line)


def test_the_branch_check_sees_a_branch():
    found = _branches('    if spec.kind == "qa":\n        pass\n', KIND_BRANCHES, "x.py")
    assert found == ['x.py:1: if spec.kind == "qa":']
    assert _branches('ok = m.kind in ("classification", "tokens")', KIND_BRANCHES)
    assert _branches("if config.is_roberta:", FAMILY_FLAGS) and _branches("a.model_type == 'roberta'", FAMILY_FLAGS)
    assert _branches("kinds.get(spec.kind).recipe", KIND_BRANCHES) == []


def test_every_registered_task_kind_is_one_module():
    for name, kind in kinds.KINDS.items():
        assert kind.name == name and type(kind).__module__ == f"jaxbert.finetune.kinds.{name}"


def test_every_subpackage_is_in_the_wheel():
    """pyproject's explicit package list names every folder of the package that holds modules."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the package supports 3.10
    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT.parent).parts) for p in ROOT.rglob("__init__.py")}
    assert folders - listed == set()
