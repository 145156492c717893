"""The fine-tuning demo: what pretraining buys, on a real task made from the embedded corpus.

The task: does a standard-library docstring document a module, a class or a function? The
labels are read from the source (jaxbert.data.embedded.documented_objects), so nobody
annotated them and they are true. The text is the docstring's first paragraph. An object goes
to the held-out split when sha256(module, qualname) says so (a fixed share), a text found under
several objects is kept once (with its first object's split; texts seen with two kinds are
dropped), so no text is in both splits; each split is then balanced, the same number per
kind, picked in hash order. Everything is a function of the Python version's stdlib source.

`run_demo` fine-tunes several models with one recipe on that task and reports each model's
held-out accuracy and macro F1 at the end of training (no checkpoint picked on held-out data).
The shipped demo compares real pretrained weights (all-MiniLM-L6-v2), the tiny-demo's own
pretrained model, and the tiny-demo's architecture with fresh random weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

import jax

from jaxbert import fs
from jaxbert.convert import save_pretrained
from jaxbert.convert.export import TOKENIZER_FILES
from jaxbert.packaged import MINILM_NAMES, MINILM_PACKAGE, minilm_folder, resolve_model  # noqa: F401 (re-exported)
from jaxbert.data.embedded import documented_objects
from jaxbert.errors import InputError
from jaxbert.finetune.loop import finetune
from jaxbert.finetune.model import source_config
from jaxbert.finetune.recipe import FinetuneRecipe
from jaxbert.model.families import family_of
from jaxbert.model.classes import build_model, dummy_inputs
from jaxbert.finetune.task_data import parse_task

KINDS = ("module", "class", "function")
HELD_OUT_PERCENT = 25  # share of objects hashed into the held-out split
DEFAULT_PER_KIND = (200, 80)

# One measured time for each, quoted by README and printed by the demo (2 CPU cores, other jobs beside):
# `jaxbert finetune-demo` at the default sizes took 3 min 27 s (203 s by its own count, commit 2e34731);
# `jaxbert train` (the tiny-demo) took 9 min 34 s from the command to the summary (README's run).
DEMO_SECONDS = 207
TRAIN_TINY_DEMO = "about 10 minutes on 2 CPU cores; it prints its own estimate after its first steps"



def demo_estimate(n_train: int) -> str:
    """The demo's expected wall time: the measured run's, scaled by the training rows per kind."""
    seconds = DEMO_SECONDS * max(n_train, 1) / DEFAULT_PER_KIND[0]
    return (f"about {_minutes(seconds)} on 2 CPU cores (measured: {_minutes(DEMO_SECONDS, exact=True)} at "
            f"--per-kind {DEFAULT_PER_KIND[0]} {DEFAULT_PER_KIND[1]}; time grows with the training rows)")


def _minutes(seconds: float, exact: bool = False) -> str:
    if exact:
        return f"{int(seconds) // 60} min {int(seconds) % 60} s"
    if seconds < 90:
        return f"{max(10, round(seconds / 10) * 10):.0f} s"
    return f"{round(seconds / 60)} minutes"


def demo_paths(workdir, names: Sequence[str]) -> list:
    """What run_demo writes under a kept --workdir: the two data files and one folder per model."""
    root = fs.as_path(workdir)
    return [root / "data" / "train.jsonl", root / "data" / "heldout.jsonl", *(root / _folder(n) for n in names)]


def check_demo_workdir(workdir, names: Sequence[str]) -> None:
    """InputError, before anything is written, when a kept --workdir already holds what the demo would
    write (a file, a model's run): the demo trains from scratch and replaces nothing."""
    root = fs.as_path(workdir)
    if root.exists() and not root.is_dir():
        raise InputError(f"--workdir {root}: exists and is not a folder")
    taken = [p for p in demo_paths(root, names) if p.exists()]
    if taken:
        shown = ", ".join(os.fspath(p) for p in taken[:3]) + (f" and {len(taken) - 3} more" if len(taken) > 3 else "")
        raise InputError(f"--workdir {root}: already holds {shown}; the demo trains from scratch and replaces "
                         f"nothing: pass a new --workdir")


def _folder(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-") or "model"


def first_paragraph(doc: str, max_words: int = 80) -> str:
    """The docstring's text up to its first blank line, whitespace collapsed, at most max_words words."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    return " ".join(para.split()[:max_words])


def _bucket(module: str, qualname: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{module}\0{qualname}".encode()).digest()[:8], "big")


def docstring_task(n_train: int = 200, n_test: int = 100, objects: Iterable | None = None,
                   min_words: int = 3) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows): {"text", "label", "module", "qualname"}, n_train / n_test per kind.

    objects: (module, qualname, kind, docstring) tuples (default: the stdlib's documented objects).
    Raises InputError when a split has fewer than the asked number of texts of some kind.
    """
    by_text: dict[str, dict] = {}
    kinds_of: dict[str, set] = {}
    for module, qualname, kind, doc in (documented_objects() if objects is None else objects):
        text = first_paragraph(doc)
        if len(text.split()) < min_words:
            continue
        kinds_of.setdefault(text, set()).add(kind)
        h = _bucket(module, qualname)
        row = {"text": text, "label": kind, "module": module, "qualname": qualname, "_h": h}
        if text not in by_text or h < by_text[text]["_h"]:  # the text's first object by hash decides
            by_text[text] = row
    split = {"train": {k: [] for k in KINDS}, "test": {k: [] for k in KINDS}}
    for text, row in by_text.items():
        if len(kinds_of[text]) > 1:
            continue  # one text, two kinds: not a fact about the text
        which = "test" if row["_h"] % 100 < HELD_OUT_PERCENT else "train"
        split[which][row["label"]].append(row)
    out = []
    for which, n in (("train", n_train), ("test", n_test)):
        rows = []
        for kind in KINDS:
            have = sorted(split[which][kind], key=lambda r: (r["_h"], r["text"]))
            if len(have) < n:
                raise InputError(f"the {which} split has {len(have)} {kind} docstrings, fewer than {n}")
            rows += have[:n]
        rows.sort(key=lambda r: (r["_h"], r["text"]))  # kinds interleaved, in hash order
        out.append([{k: v for k, v in r.items() if k != "_h"} for r in rows])
    return out[0], out[1]


def write_jsonl(path: Path, rows: Sequence[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fs.atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    return path


@dataclasses.dataclass
class Contender:
    """One model of the demo: a name, SRC (anything `jaxbert finetune --model` takes), its tokenizer."""
    name: str
    source: str
    tokenizer: str | None = None


def fresh_copy(source, tokenizer, where: Path, seed: int = 0) -> Path:
    """SRC's architecture (its config) with freshly initialised weights and SRC's tokenizer, saved
    as a Hugging Face directory at `where`: the "no pretraining" control."""
    config = source_config(source)
    family = family_of(config)
    name = family.mlm_class(config.model_type)
    model = build_model(name, config)
    ids, types = dummy_inputs(name, 1, 8)
    params = model.init(jax.random.PRNGKey(seed), ids, types)["params"]
    save_pretrained(where, model, params, overwrite=True)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer) / name).is_file():
            shutil.copy2(Path(tokenizer) / name, where / name)
    return where


def run_demo(contenders: Sequence[Contender], recipe: FinetuneRecipe, train_rows, test_rows, workdir=None,
             log=print) -> list[dict]:
    """Fine-tunes each contender on the rows with the same recipe; one result per contender:
    {"name", "source", "accuracy", "macro_f1", "seconds", "steps"} (scores of the held-out split
    at the end of training). workdir None: a temporary folder, removed after."""
    if workdir is not None:  # every path checked before the first is written
        check_demo_workdir(workdir, [c.name for c in contenders])
    with tempfile.TemporaryDirectory(prefix="jaxbert-ft-demo-") as tmp:
        root = fs.as_path(workdir) if workdir is not None else Path(tmp)
        train = write_jsonl(root / "data" / "train.jsonl", train_rows)
        test = write_jsonl(root / "data" / "heldout.jsonl", test_rows)
        spec = parse_task("classification", train, [test], text_columns=("text",), label_column="label",
                          labels=KINDS)
        results = []
        for c in contenders:
            where = root / _folder(c.name)
            t0 = time.perf_counter()
            summary = finetune(recipe, spec, c.source, where, tokenizer=c.tokenizer, log=log)
            final = summary["history"][-1]["evals"]["heldout"]
            results.append({"name": c.name, "source": str(c.source), "accuracy": final["accuracy"],
                            "macro_f1": final["macro_f1"], "seconds": round(time.perf_counter() - t0, 1),
                            "steps": summary["step"]})
            log(f"{c.name}: held-out accuracy {final['accuracy']:.4f}, macro F1 {final['macro_f1']:.4f} "
                f"({results[-1]['seconds']:.0f} s)")
    return results


def results_table(results: Sequence[dict], n_train: int, n_test: int) -> str:
    width = max(len(r["name"]) for r in results)
    lines = [f"docstring kind (module / class / function), {n_train} train and {n_test} held-out per kind:",
             f"{'model':<{width}}  accuracy  macro F1  seconds"]
    lines += [f"{r['name']:<{width}}  {r['accuracy']:8.4f}  {r['macro_f1']:8.4f}  {r['seconds']:7.1f}"
              for r in results]
    lines.append(f"(chance: accuracy {1 / len(KINDS):.4f})")
    return "\n".join(lines)
