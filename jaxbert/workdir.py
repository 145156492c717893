"""The training workdir: its layout, its checkpoints and what a run records in them.

One module writes and reads the format: the training loop saves through ``Checkpoints``
and ``write_recipe``; every reader (from_pretrained and export, fill-mask, parity,
fine-tuning, plot) goes through ``read_run``, ``read_params``, ``run_tokenizer`` and
``read_recipe``. Nothing is re-derived by a reader: a checkpoint records the run's
BertConfig and model class beside its recipe.

    WORKDIR/
      recipe.yaml            the effective recipe (overrides and planned values applied)
      checkpoints/<step>/    Orbax: state (params, opt_state, step, rng) and meta (JSON: step,
                             every process's loader state, recipe, config, model_class)
      checkpoints.corrupt/   steps that could not be read back, set aside
      tokenizer/, data/      the tokenizer and prepared data, when the run built them here
      metrics.jsonl, tensorboard/
      hf/, curves.png, fill_mask.txt   outputs of a finished run
      best/, eval.json       fine-tuning: the best evaluation's model (Hugging Face) and every score
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Mapping

import jax
import numpy as np
import orbax.checkpoint as ocp
import yaml
from jax.experimental import multihost_utils

from jaxbert import fs
from jaxbert.errors import InputError, install_hint
from jaxbert.fs import atomic_write_text
from jaxbert.model.config import BertConfig, ConfigError, build_config, read_config_dict
from jaxbert.model.families import family_of_params

CHECKPOINTS = "checkpoints"
CORRUPT = "checkpoints.corrupt"
RECIPE = "recipe.yaml"
TOKENIZER = "tokenizer"
DATA = "data"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
EXPORT = "hf"
CURVES = "curves.png"
FILL_MASK = "fill_mask.txt"
BEST = "best"  # fine-tuning: the best evaluation's model, a Hugging Face directory
DOWNSTREAM = "downstream"  # pretraining: the fine-tuning workdirs of outputs.downstream, one folder per item
KIND_FILE = ".jaxbert-workdir"  # which kind of workdir a folder is: {"kind": PRETRAINING | FINETUNING}
PRETRAINING, FINETUNING = "pretraining", "finetuning"
LOCK = ".jaxbert-train.lock"  # jaxbert.engine.lock's file
EVAL = "eval.json"  # fine-tuning: every evaluation and the best score
OUTPUTS = {CURVES: "loss and accuracy curves",
           EXPORT: f"Hugging Face model + tokenizer (transformers with PyTorch: {install_hint('torch')})",
           FILL_MASK: "fill-mask showcase, with the rank of the right word",
           METRICS: "every logged metric, one JSON per line",
           TENSORBOARD: "TensorBoard event files (pip install tensorboard; tensorboard --logdir {path})",
           RECIPE: "the recipe as run",
           BEST: "fine-tuning: the best checkpoint by the task's main metric, a Hugging Face directory",
           EVAL: "fine-tuning: every evaluation's metrics and the best score",
           TOKENIZER: "the tokenizer trained for this run",
           DATA: "the prepared data built for this run",
           CHECKPOINTS: "Orbax checkpoints; the run resumes from the newest"}


class WorkdirError(InputError):
    """A workdir that holds no readable checkpoint, or one whose records are incomplete."""


def path(workdir, name: str) -> Path:
    """WORKDIR/name for one of this module's names (CHECKPOINTS, RECIPE, METRICS, ...)."""
    return fs.as_path(workdir) / name


def downstream_dir(workdir, item: str) -> Path:
    """The fine-tuning workdir of one outputs.downstream item inside a pretraining workdir."""
    return fs.as_path(workdir) / DOWNSTREAM / item


def write_recipe(workdir, recipe: dict) -> Path:
    """Writes the recipe as run (a plain dict) to WORKDIR/recipe.yaml."""
    workdir = fs.as_path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(workdir / RECIPE, yaml.safe_dump(recipe, sort_keys=False))
    return workdir / RECIPE


def read_recipe(workdir) -> dict | None:
    """WORKDIR/recipe.yaml as a dict, or None when the workdir has none."""
    p = fs.as_path(workdir) / RECIPE
    return (yaml.safe_load(p.read_text()) or {}) if p.exists() else None


def state_tree(step, params, opt_state, rng) -> dict:
    """What a checkpoint holds as arrays; everything else goes in ``checkpoint_meta``'s JSON."""
    return {"step": step, "params": params, "opt_state": opt_state, "rng": rng}


def checkpoint_meta(step: int, loader_states: list, recipe: dict, config: BertConfig, model_class: str,
                    task: tuple[dict, list] | None = None) -> dict:
    """The JSON beside a checkpoint's arrays: loader_states holds every process's loader state, in order
    (each records the global stream position, the same in every process: a resume reads the first).
    task: a fine-tuning run's (record a resume must match, evaluation history)."""
    meta = {"step": step, "loader": loader_states, "recipe": recipe, "config": config.to_dict(),
            "model_class": model_class}
    if task is not None:
        meta[_TASK_META] = {"task": task[0], "history": task[1]}
    return meta


def saved_recipe(meta: Mapping) -> dict:
    """The recipe (as a dict) a checkpoint was saved with; {} for a checkpoint without one."""
    return dict(meta.get("recipe") or {})


_TASK_META = "finetune"  # the meta key of a fine-tuning run's task record and history
_WINDOW_META = "metric_window"  # the metric sums of the steps after the last log row, up to the saved step


def with_metric_window(meta: dict, window: dict | None) -> dict:
    """meta with the unlogged steps' metric sums (``MetricWindow.carry``): a run resumed from this step
    logs the rows a run that never stopped writes."""
    if window is not None:
        meta[_WINDOW_META] = window
    return meta


def metric_window(meta: Mapping | None) -> dict | None:
    """The metric sums ``with_metric_window`` recorded; None for a checkpoint without them."""
    return (meta or {}).get(_WINDOW_META)


def task_record(meta: Mapping) -> dict:
    """The task record a fine-tuning checkpoint was saved with ({} for a pretraining one)."""
    return dict((meta.get(_TASK_META) or {}).get("task") or {})


def newest_task_record(workdir) -> dict:
    """The task record of the workdir's newest readable checkpoint ({} when it has none)."""
    try:
        return task_record(_newest_meta(fs.as_path(workdir))[1])
    except WorkdirError:
        return {}


def task_history(meta: Mapping) -> list:
    """The evaluation history a fine-tuning checkpoint was saved with."""
    return list((meta.get(_TASK_META) or {}).get("history") or [])


def _read_meta(root: Path, step: int) -> dict:
    return json.loads((root / str(step) / "meta" / "metadata").read_text())


class CheckpointWriteError(InputError):
    """A checkpoint could not be written (disk full, file size limit, permissions)."""


class _OneLine(logging.Filter):
    """Orbax logs a failed background write with its traceback, then raises it to us, and
    we report it as one line: the log keeps the message and drops the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.exc_info:
            record.exc_info, record.exc_text = None, None
        return True


if not any(isinstance(f, _OneLine) for f in logging.getLogger("absl").filters):
    logging.getLogger("absl").addFilter(_OneLine())


class RecipeMismatch(InputError):
    """A readable checkpoint made with a recipe whose model or optimizer does not fit this one."""


def _key(k) -> str:
    """One step of a key path as a string: Orbax's saved metadata spells optax's namedtuples as
    dicts and tuples as lists, so GetAttrKey('mu') there is DictKey('mu') and a SequenceKey(1)
    of the state is DictKey/SequenceKey 1: compare the names, not the container types."""
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _layout(tree) -> dict:
    """{key path (strings): (shape, dtype)} of a tree's arrays."""
    return {tuple(_key(k) for k in path): (tuple(x.shape), np.dtype(x.dtype).name)
            for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _diff(a, b, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, value in a, value in b) where two nested dicts differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


class Checkpoints:
    def __init__(self, workdir: str | Path, every_steps: int, keep: int, async_save: bool = True,
                 log: Callable[[str], None] = print):
        self.directory = fs.as_path(workdir) / CHECKPOINTS  # Orbax writes a URL through TensorStore
        self.every_steps = every_steps
        self.log = log
        self._differs: list[str] = []  # key paths where the last step _fits looked at differs
        self.restored_meta: dict | None = None  # the meta of the checkpoint restore_latest returned
        self._options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self._mngr = self._open()

    def _open(self) -> ocp.CheckpointManager:
        return ocp.CheckpointManager(self.directory, options=self._options, item_names=("state", "meta"))

    def steps(self) -> list[int]:
        return sorted(self._mngr.all_steps())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def due(self, step: int) -> bool:
        return step % self.every_steps == 0

    def save(self, step: int, tree: dict, meta: dict) -> None:
        """Starts saving tree (arrays, see ``state_tree``) and meta (JSON, see ``checkpoint_meta``) as `step`;
        returns before the write ends. Every process must call it (the arrays may be sharded across hosts).
        """
        if step in self._mngr.all_steps():
            return  # already saved (e.g. a SIGTERM right after a periodic save)
        args = ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta))
        with self._writing():
            self._mngr.save(step, args=args, force=True)

    def restore_latest(self, abstract_tree, recipe: dict | None = None) -> tuple[int, dict, dict] | None:
        """(step, tree, meta) of the newest readable checkpoint, or None when there is none.

        abstract_tree: ShapeDtypeStructs with shardings, the layout to restore into.
        A checkpoint whose saved arrays do not fit that layout (key paths, shapes, dtypes:
        another model, or another optimizer, whose opt_state is another tree) was made with another
        recipe: RecipeMismatch names the fields that differ (from ``recipe``, the
        recipe as a dict), and every checkpoint stays where it is. Only a step that
        cannot be read is set aside as corrupt.
        """
        for step in reversed(self.steps()):
            if self._fits(step, abstract_tree) is False:
                raise RecipeMismatch(self._mismatch(step, recipe))
            args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_tree),
                                      meta=ocp.args.JsonRestore())
            try:
                restored = self._mngr.restore(step, args=args)
                self.restored_meta = dict(restored.meta)
                return step, restored.state, restored.meta
            except Exception as e:  # noqa: BLE001 - any failure means this step is unusable
                reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                self._set_aside(step, reason)
        return None

    def _fits(self, step: int, abstract_tree) -> bool | None:
        """Whether the saved arrays have the key paths, shapes and dtypes of abstract_tree; None if
        the saved metadata cannot be read. Another optimizer (AdamW vs LAMB, clipping on or off)
        changes the key paths of opt_state: that is a recipe mismatch, not corruption."""
        try:
            with _quiet_absl():
                saved = ocp.PyTreeCheckpointer().metadata(self.directory / str(step) / "state").item_metadata.tree
            got = _layout(saved)
        except Exception:  # noqa: BLE001 - unreadable metadata: let the restore decide (corrupt)
            return None
        want = _layout(abstract_tree)
        self._differs = sorted("/".join(k) for k in set(got) ^ set(want) | {k for k in set(got) & set(want)
                                                                            if got[k] != want[k]})
        return got == want

    def _mismatch(self, step: int, recipe: dict | None) -> str:
        where = self.directory / str(step)
        try:
            saved = _read_meta(self.directory, step)["recipe"]
        except Exception:  # noqa: BLE001
            saved = None
        diffs = _diff(saved, recipe) if saved is not None and recipe is not None else []
        fields = "; ".join(f"{k}: {a!r} in the checkpoint, {b!r} now" for k, a, b in diffs[:8])
        arrays = self._differs
        what = (f"fields that differ: {fields}" if fields else "its arrays do not fit this model or optimizer"
                + (f" (e.g. {', '.join(arrays[:3])})" if arrays else ""))
        return (f"{where} was saved with another recipe and does not fit this one ({what}); the checkpoints "
                f"are kept. Resume with the recipe it was saved with, or train in a new --workdir")

    def _set_aside(self, step: int, reason: str) -> None:
        """Moves an unreadable step out of the manager's way, so that it is neither
        restored again nor blocks a later save of the same step number."""
        dst = self.directory.parent / CORRUPT / f"{step}-{int(time.time())}"
        self.log(f"checkpoint {self.directory / str(step)} is corrupt or incomplete ({reason}); "
                 f"moved to {dst}, trying the one before it")
        if jax.process_index() == 0:
            dst.parent.mkdir(parents=True, exist_ok=True)
            (self.directory / str(step)).rename(dst)  # on a bucket: a copy, then a delete
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"jaxbert-ckpt-aside-{step}")
        self._mngr.close()
        self._mngr = self._open()

    def wait(self) -> None:
        with self._writing():
            self._mngr.wait_until_finished()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._mngr.close()

    @contextlib.contextmanager
    def _writing(self):
        """A failed (background) write, e.g. a full disk, as one line naming the folder."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - orbax/tensorstore raise ValueError, OSError, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if len(first) > 300:  # keep the start (what) and the end (why: the OS error)
                first = f"{first[:120]} ... {first[-160:]}"
            raise CheckpointWriteError(
                f"{self.directory}: cannot write a checkpoint ({first}); make room or fix the folder and run "
                "again: the run resumes from its last complete checkpoint") from e


def is_workdir(path) -> bool:
    return (fs.as_path(path) / CHECKPOINTS).is_dir()


def kind(path) -> str | None:
    """PRETRAINING or FINETUNING for a jaxbert workdir (its KIND_FILE; a workdir of an older jaxbert,
    without one, by its newest checkpoint's meta), None for any other folder."""
    p = fs.as_path(path)
    try:
        found = json.loads((p / KIND_FILE).read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        found = None
    if found in (PRETRAINING, FINETUNING):
        return found
    if not is_workdir(p):
        return None
    try:
        return FINETUNING if task_record(_newest_meta(p)[1]) else PRETRAINING
    except InputError:  # no readable checkpoint
        return PRETRAINING


def claim(workdir, what: str) -> None:
    """Before a run writes anything: the folder is new, empty, or jaxbert's workdir of this kind; it
    is then marked as one (KIND_FILE). A folder holding what jaxbert did not make (a user's own
    recipe.yaml, notes, models) is not a workdir jaxbert may write into: WorkdirError naming it."""
    p = fs.as_path(workdir)
    if p.exists() and not p.is_dir():
        raise WorkdirError(f"--workdir {p}: is a file; a workdir is a folder")
    found = kind(p)
    if found is None and p.exists():
        others = sorted(e.name for e in p.iterdir() if e.name != LOCK)
        if others:
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            raise WorkdirError(f"--workdir {p}: holds {shown}, which jaxbert did not write (it is no jaxbert "
                               f"workdir: no {KIND_FILE}); choose a new or empty folder")
    elif found is not None and found != what:
        raise WorkdirError(f"--workdir {p}: is a {found} workdir; a {what} run goes in a folder of its own")
    p.mkdir(parents=True, exist_ok=True)
    if not (p / KIND_FILE).exists():
        atomic_write_text(p / KIND_FILE, json.dumps({"kind": what}) + "\n")


@contextlib.contextmanager
def claimed(workdir, what: str, active: bool = True):
    """``claim`` for the block of a run. A run refused before it wrote anything (an exception while the
    folder it claimed afresh holds only the kind marker and a released lock) leaves nothing behind:
    the marker, the lock file and the folders the claim created are removed. active: False in the
    processes that do not write (multi-host)."""
    if not active or fs.is_url(workdir):  # a bucket path: nothing to undo that a refusal leaves behind
        if active:
            claim(workdir, what)
        yield
        return
    p = Path(workdir)
    made = []  # the folders the claim creates, deepest first
    q = p.absolute()
    while not q.exists():
        made.append(q)
        q = q.parent
    fresh = not (p / KIND_FILE).exists()
    claim(workdir, what)
    try:
        yield
    except BaseException:
        if fresh:
            _unclaim(p, made)
        raise


def _unclaim(p: Path, made: list[Path]) -> None:
    """Removes what ``claim`` and the lock wrote in p, and the folders in made, when nothing else is there."""
    try:
        entries = {e.name for e in p.iterdir()}
        lock = p / LOCK
        if not entries <= {KIND_FILE, LOCK} or (lock.exists() and lock.stat().st_size):
            return  # the run wrote something, or a lock is held: all stays
        for name in entries:
            (p / name).unlink()
        for folder in made:
            folder.rmdir()
    except OSError:
        pass  # a folder something else wrote into meanwhile stays


def check_placement(workdir) -> None:
    """WorkdirError when a training workdir would lie in a folder that jaxbert published (prepared
    data, a model, a tokenizer): replacing that output (--overwrite) would take the run with it."""
    found = fs.enclosing_output(workdir)
    if found is not None:
        folder, kind = found
        where = "is" if os.fspath(folder) == os.fspath(fs.as_path(workdir)) else "is inside"
        raise WorkdirError(f"workdir {fs.as_path(workdir)} {where} {folder}, a jaxbert {kind} output (its "
                           f"{fs.MARKER}); a training workdir goes in a folder of its own: choose another --workdir")


def workdirs_near(path, depth: int = 3) -> list[Path]:
    """Training workdirs that hold `path` or that `path` holds (down to `depth` levels), nearest first."""
    p = fs.as_path(path)
    found = [q for q in (p, *p.parents) if is_workdir(q)]
    if p.is_dir():
        level = [p]
        for _ in range(depth):
            level = [c for q in level for c in q.iterdir() if c.is_dir() and c.name != CHECKPOINTS]
            found += [c for c in level if is_workdir(c)]
    return found


def _steps(root) -> list[int]:
    """Checkpoint steps under root, newest first. On a bucket (no rename) Orbax marks a finished
    step with commit_success.txt; a step without it is still being written."""
    steps = sorted((int(p.name) for p in root.glob("*") if p.name.isdigit()), reverse=True)
    if fs.is_url(root):
        steps = [s for s in steps if (root / str(s) / "commit_success.txt").exists()]
    return steps


READ_ATTEMPTS = 20  # re-listings when a running job's max_to_keep deletes the step being read


def read_params(workdir, step: int | None = None, log=print) -> tuple[dict, dict]:
    """(params as NumPy arrays, meta) from a workdir's newest readable (or given) checkpoint.

    Reads only the params, on the host, without knowing their layout in advance:
    enough for export, fill-mask and continued pretraining on any machine.

    A run may be writing checkpoints meanwhile, and deleting old ones (checkpoint.keep):
    a step that vanishes while it is read is not unreadable, it was replaced, so the
    steps are listed again and the newest one there now is read (a bounded number of
    times). Only a step that is still there and cannot be read is skipped as unreadable.
    """
    if not fs.as_path(workdir).exists():
        raise WorkdirError(f"{workdir}: does not exist")
    root = fs.as_path(workdir) / CHECKPOINTS
    kept = _steps(root) if root.exists() else []
    if not kept:
        raise WorkdirError(f"{root}: no checkpoint in it")
    if step is not None and step not in kept:
        raise WorkdirError(f"{root}: no checkpoint of step {step}; the steps kept: "
                           f"{', '.join(map(str, sorted(kept)))}")
    if step is not None:
        try:
            return _read_params_at(root, step)
        except Exception as e:  # noqa: BLE001
            raise WorkdirError(f"{root / str(step)}: unreadable checkpoint ({type(e).__name__}: {e})") from None
    bad: set[int] = set()
    last_error = None
    for _ in range(READ_ATTEMPTS):
        steps = [s for s in _steps(root) if s not in bad]
        if not steps:
            break
        s = steps[0]
        try:
            return _read_params_at(root, s)
        except Exception as e:  # noqa: BLE001 - vanished (re-list) or unreadable (the one before)
            last_error = e
            if s in _steps(root):
                bad.add(s)
                log(f"checkpoint {root / str(s)} is unreadable ({type(e).__name__}); trying the one before")
    if last_error is None and not bad:
        raise WorkdirError(f"{root}: no checkpoint in it")
    raise WorkdirError(f"{root}: no readable checkpoint ({type(last_error).__name__}: {last_error})")


def _read_params_at(root, s: int) -> tuple[dict, dict]:
    meta = _read_meta(root, s)
    reader = ocp.PyTreeCheckpointer()
    with _quiet_absl():  # the item has no step-level metadata file; absl says so at WARNING
        tree = reader.metadata(root / str(s) / "state").item_metadata.tree
    as_numpy = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree["params"])
    restored = reader.restore(root / str(s) / "state", args=ocp.args.PyTreeRestore(
        item={"params": tree["params"]}, restore_args={"params": as_numpy}, partial_restore=True))
    return restored["params"], meta


@contextlib.contextmanager
def _quiet_absl():
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_config(meta: Mapping, vocab_size: int, where) -> tuple[BertConfig, str]:
    """(BertConfig, model class) a checkpoint was trained with: as it recorded them; a checkpoint from
    before they were recorded names them in its recipe's model section (preset, config, model_class)."""
    if isinstance(meta.get("config"), dict) and meta.get("model_class"):
        return read_config_dict(meta["config"]), meta["model_class"]
    model = (meta.get("recipe") or {}).get("model")
    if not isinstance(model, dict) or "preset" not in model or "model_class" not in model:
        raise WorkdirError(f"{where}: its checkpoint records neither the model config nor the recipe's "
                           "model.preset and model.model_class")
    try:
        config = build_config(model["preset"], model.get("config") or {}, vocab_size, model["model_class"])
    except ConfigError as e:
        raise WorkdirError(f"{where}: its recipe's model section does not build a config ({e})") from None
    return config, model["model_class"]


def run_tokenizer_dir(data: Mapping, workdir) -> Path | None:
    """Where a run's tokenizer lives, from its recipe's ``data`` section: data.tokenizer;
    else the directory the data was prepared with (its metadata says) or, failing
    that, the data dir's tokenizer.json (a mixture's first source's); WORKDIR/tokenizer for data built in the
    workdir; None for synthetic data."""
    if data.get("source") == "synthetic":
        return None
    if data.get("tokenizer"):
        return fs.as_path(data["tokenizer"])
    folder = data.get("dir")
    if folder is None and data.get("sources"):  # a mixture: its sources share one tokenizer
        folder = (data["sources"][0] or {}).get("dir")
    if folder is None:
        return fs.as_path(workdir) / TOKENIZER
    meta_path = fs.as_path(folder) / "metadata.json"
    origin = json.loads(meta_path.read_text()).get("tokenizer") if meta_path.exists() else None
    try:
        found = bool(origin) and (fs.as_path(origin) / "tokenizer.json").exists()
    except InputError:  # prepared elsewhere, with a tokenizer this host cannot reach
        found = False
    return fs.as_path(origin if found else folder)


def read_run(workdir, step: int | None = None) -> tuple[BertConfig, str, dict, Path | None]:
    """(config, model class name, params, tokenizer dir or None) of a workdir's checkpoint."""
    params, meta = read_params(workdir, step)
    try:
        vocab = family_of_params(params).word_embeddings(params).shape[0]
    except (KeyError, TypeError, AttributeError) as e:
        raise WorkdirError(f"{workdir}: its checkpoint has no word embeddings "
                           f"({e.args[0] if e.args else type(e).__name__})") from None
    config, model_class = run_config(meta, vocab, workdir)
    return config, model_class, params, run_tokenizer_dir((meta.get("recipe") or {}).get("data") or {}, workdir)


def tokenizer_path(path) -> Path | None:
    """The tokenizer that belongs to a checkpoint: a workdir's run tokenizer, else the
    directory holding the checkpoint when it has tokenizer.json or vocab.txt; None if neither."""
    if is_workdir(path):
        path = fs.as_path(path)
        _, meta = _newest_meta(path)
        return run_tokenizer_dir((meta.get("recipe") or {}).get("data") or {}, path)
    path = fs.local_copy(path)  # a URL: a local copy of it
    folder = path if path.is_dir() else path.parent
    return folder if any((folder / n).is_file() for n in ("tokenizer.json", "vocab.txt")) else None


def recorded_config(workdir) -> dict:
    """The model config (a config.json dict) the workdir's newest readable checkpoint records, {} if none."""
    return dict(_newest_meta(fs.as_path(workdir))[1].get("config") or {})


def recorded_loader(workdir) -> dict | None:
    """The loader state (the first process's) of the workdir's newest readable checkpoint; None if none."""
    try:
        loader = _newest_meta(fs.as_path(workdir))[1].get("loader") or [None]
    except WorkdirError:
        return None
    return loader[0]


def _newest_meta(workdir: Path) -> tuple[int, dict]:
    root = workdir / CHECKPOINTS
    for step in _steps(root):
        try:
            return step, _read_meta(root, step)
        except (OSError, ValueError):
            continue
    raise WorkdirError(f"{root}: no checkpoint in it")
