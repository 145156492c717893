"""The task model: SRC's encoder under a new head sized for the task's labels.

`task_config` gives SRC's config (its family's config class: BertConfig, ModernBertConfig) the
task's labels (id2label / label2id, problem_type: what the kind's Kind in jaxbert.finetune.kinds
says), and `kind_of` reads a kind back from a fine-tuned config; `load_task_model` reads SRC
(anything from_pretrained reads: an HF or jaxbert directory, a pretraining workdir, a TensorFlow
checkpoint, RoBERTa / XLM-R, ModernBERT) into the task's class, the head class of SRC's family
(jaxbert.model.families). Params the task has and SRC lacks are initialised as transformers
initialises them (load_checkpoint: the family's own init, seeded: BERT's normal(initializer_range)
kernels and zero biases, ModernBERT's truncated normals); that is allowed only for the head and
the pooler. Anything else missing means SRC is not an encoder of this architecture, an error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from jaxbert import fs
from jaxbert.convert.load import init_leaves
from jaxbert.convert.pretrained import load_checkpoint
from jaxbert.errors import InputError
from jaxbert.finetune import kinds
from jaxbert.finetune.kinds.base import problem_type
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.configs import read_config
from jaxbert.model.families import family_of, root_of
from jaxbert.workdir import is_workdir, read_run, recorded_config

# Kept in config.json beside transformers' keys (it ignores them): what `jaxbert predict` needs to
# read a file the way training did; under OPTIONS_KEY the kind's options training used.
TASK_KEY = "jaxbert_task"
OPTIONS_KEY = "options"


def kind_of(config: BertConfig) -> kinds.Kind:
    """The task kind of a fine-tuned model's config: among the registered kinds whose head and
    problem_type it matches exactly, the one its task record names, else the first registered."""
    found = kinds.recognising(config)
    recorded = (config.extra.get(TASK_KEY) or {}).get("kind")
    for kind in found:
        if kind.name == recorded:
            return kind
    if found:
        return found[0]
    heads = ", ".join(dict.fromkeys(f"...{k.head}" + (f" ({k.problem_type})" if k.problem_type else "")
                                    for k in kinds.KINDS.values()))
    raise InputError(f"config architectures {config.architectures} (problem_type {problem_type(config)!r}) "
                     f"name no fine-tuned task class ({heads})")


def source_config(src) -> BertConfig:
    """SRC's own config: a workdir's recorded run config, else config.json / bert_config.json beside it,
    read as its model_type's family reads it (a ModernBERT's as a ModernBertConfig)."""
    if is_workdir(src):
        return read_run(src)[0]
    p = fs.local_copy(src)
    folder = p if p.is_dir() else p.parent
    for name in ("config.json", "bert_config.json"):
        if (folder / name).is_file():
            return read_config(folder / name)
    raise InputError(f"{src}: no config.json or bert_config.json beside it; is it a model directory?")


SMALL_HIDDEN = 128  # a model this narrow (the tiny-demo's 128) gets finetune-tiny by default


def default_recipe(kind: kinds.Kind | str, src, log=print) -> str:
    """The recipe for fine-tuning SRC on a task of this kind when none is named (`finetune` and `glue`
    alike), said in the log: the kind's BERT-base recipe (finetune-glue, finetune-squad for qa), or for a
    model of hidden size SMALL_HIDDEN or less finetune-tiny (lr 2e-5 barely moves a model of the
    tiny-demo's size)."""
    k = kinds.resolve(kind)
    base = k.recipe
    hidden = _hidden_size(src)
    if hidden is not None and hidden <= SMALL_HIDDEN:
        log(f"recipe finetune-tiny: {src} is a small model (hidden size {hidden}); {base}'s learning rate is "
            f"made for BERT-base and barely moves it (--config {base} to use it anyway)")
        return "finetune-tiny"
    size = f"hidden size {hidden}" if hidden is not None else "hidden size unknown"
    log(f"recipe {base}: the {k.name} default for {src} ({size}; --config NAME for another)")
    return base


def _hidden_size(src) -> int | None:
    """SRC's hidden size from its recorded config (a workdir's newest checkpoint, or config.json); None if unknown."""
    try:
        if is_workdir(src):
            return recorded_config(src).get("hidden_size")
        return source_config(src).hidden_size
    except Exception:  # noqa: BLE001 - unreadable here: the run reports it by name
        return None


def task_config(base: BertConfig, kind: kinds.Kind | str, labels: Sequence[str] | None,
                task_info: dict | None = None) -> BertConfig:
    """base with the task's head size, label names and problem_type; architectures = the task's class."""
    k = kinds.resolve(kind)
    id2label = k.id2label(labels)
    extra = dict(base.extra)
    if task_info is not None:
        extra[TASK_KEY] = task_info
    fields = {"problem_type": k.problem_type, "architectures": [head_class(base, k)]}
    own = {f.name for f in dataclasses.fields(base)}  # a family's config may hold them as fields
    changes = {}
    for key, value in fields.items():
        extra.pop(key, None)
        if key in own:
            changes[key] = tuple(value) if isinstance(value, list) else value
        elif value is not None:
            extra[key] = value
    return base.replace(id2label=id2label, label2id={v: k for k, v in id2label.items()}, num_labels=None,
                        extra=extra, **changes)


def head_class(config: BertConfig, kind: kinds.Kind | str) -> str:
    """The task's class in config's family: 'BertForSequenceClassification', 'RobertaForTokenClassification',
    'ModernBertForQuestionAnswering'."""
    family = family_of(config)
    return config.class_name(family.class_prefix(config.model_type) + kinds.resolve(kind).head)


@dataclass
class LoadedModel:
    config: BertConfig
    class_name: str
    params: dict  # NumPy, the task class's layout
    dropped: list[str]  # SRC tensors the task does not use (state-dict names)
    fresh: list[str]  # task params SRC lacked, initialised (dotted param paths)

    def describe(self, src) -> str:
        n = self.config.num_labels  # a bare encoder (the embedding kind's ...Model) has no labels to count
        labels = "" if self.class_name.endswith("Model") else f" ({n} label{'s' if n != 1 else ''})"
        lines = [f"{src} -> {self.class_name}{labels}"]
        if self.dropped:
            lines.append(f"  dropped from {src} (the task does not use them): {', '.join(self.dropped)}")
        if self.fresh:
            init = root_of(family_of(self.config)).describe_init(self.config, self.class_name)
            lines.append(f"  initialised fresh ({init}): {', '.join(self.fresh)}")
        return "\n".join(lines)


def load_task_model(src, kind: kinds.Kind | str, labels, *, scan_layers: bool = False, dtype="float32", seed: int = 0,
                    task_info: dict | None = None) -> LoadedModel:
    """SRC's encoder in the task's class, with a new head; InputError if more than the head is missing."""
    kind = kinds.resolve(kind)
    own = source_config(src)
    config = task_config(own, kind, labels, task_info)
    name = head_class(config, kind)
    config, name, params, report = load_checkpoint(src, name, config=config, dtype=dtype, strict=False,
                                                   scan_layers=scan_layers, seed=seed)
    prefix = family_of(config).prefix
    note = (_fresh_head_for_other_labels(own, config, name, params, report, scan_layers, seed)
            if kind.named_labels else [])  # a head without class names maps nothing onto them
    body = [p for p in report.missing_paths if p.split("/")[0] == prefix and not p.startswith(f"{prefix}/pooler/")]
    if body:
        shown = ", ".join(body[:6]) + (" ..." if len(body) > 6 else "")
        raise InputError(f"{src} lacks {len(body)} encoder params of {name} ({shown}); it is not a "
                         f"{config.model_type} encoder of this size")
    fresh = [p.replace("/", ".") for p in report.missing_paths] + note
    return LoadedModel(config, name, params, report.unused_keys, fresh)


def _fresh_head_for_other_labels(own: BertConfig, config: BertConfig, name: str, params: dict, report,
                                 scan_layers: bool, seed: int) -> list[str]:
    """SRC fine-tuned with the same head class but other labels (same count, so the shapes fit): its head
    would silently map old classes onto new ones. Its head params are initialised fresh instead, in
    place; returns them as "path (SRC's head had labels [...])" for the report."""
    same_class = (own.architectures or [""])[0] == name
    old = [own.id2label[i] for i in sorted(own.id2label)] if own.id2label else None
    new = [config.id2label[i] for i in sorted(config.id2label)]
    if not same_class or old is None or old == new:
        return []
    prefix = family_of(config).prefix
    paths = []

    def walk(node, path):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, path + (k,))
            elif path[:1] != (prefix,):
                paths.append(path + (k,))
    walk(params, ())
    if not paths:
        return []
    fresh = init_leaves(config, name, scan_layers, None, paths, next(iter(_leaves(params))).dtype, seed)
    for path, value in fresh.items():
        node = params
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return [f"{'.'.join(p)} (SRC's head had labels {old})" for p in paths]


def _leaves(node):
    for v in node.values():
        yield from (_leaves(v) if isinstance(v, dict) else [v])
