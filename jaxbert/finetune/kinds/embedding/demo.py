"""The embedding demo: retrieval pairs from the embedded Python documentation, nothing downloaded.

Two sources, both shipped with every Python (jaxbert.data.embedded): the sections of the language
reference (`pydoc_data.topics`: a section's title is the query, its body the passage) and the
docstrings of the standard library (the docstring's first sentence is the query, the rest of the
docstring the passage, so the passage never contains its query's sentence). Nobody wrote the pairs:
each query is the text's own author's summary of the passage.

What keeps the evaluation honest:
- a query text or a passage text that occurs in two candidate pairs is dropped from all of them (no
  query with two right answers, no passage twice in the pooled corpus);
- a pair whose query occurs (case and spacing aside) inside another pair's passage is dropped: that
  other passage would answer it word for word;
- the held-out split is chosen by group (a topic, or a top-level standard-library package: all of
  `email.*` falls on one side), by sha256 of the group's name, so no module or topic has pairs on
  both sides, and no text is in both splits.
Within each split the pairs are taken in hash order, so a larger split keeps the smaller one's pairs.
Everything is a function of the Python version's documentation.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydoc_data import topics as pydoc_topics

from jaxbert import fs
from jaxbert.data.embedded import documented_objects
from jaxbert.errors import InputError
from jaxbert.finetune.demo import write_jsonl
from jaxbert.finetune.kinds.embedding.run import train_embedding
from jaxbert.finetune.task_data import parse_task

HELD_OUT_PERCENT = 20  # share of groups (topics, top-level packages) hashed into the held-out split
MIN_QUERY_WORDS = 3
MIN_PASSAGE_WORDS = 12
MAX_PASSAGE_WORDS = 160  # about the 256 tokens of the demo's recipe; longer passages are cut at a word
DEFAULT_PAIRS = (512, 256)  # training and held-out pairs of `jaxbert finetune-demo --task embedding`

_HEADING = re.compile(r"^(\S.*)\n([*=\-~^])\2{2,}[ \t]*$", re.MULTILINE)  # a reST title and its underline
_RULE = re.compile(r"([-=*~^#_])\1{2,}")  # reST rules and underlines inside a docstring
_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s+|$)(.*)$", re.DOTALL)


def _words(text: str) -> str:
    return " ".join(text.split())


def topic_sections(topics: dict | None = None) -> Iterable[tuple[str, str, str, str]]:
    """(group, key, title, body) for every section of the language reference: group is the topic's
    name, the body the section's text up to the next heading, whitespace collapsed."""
    if topics is None:
        topics = pydoc_topics.topics
    for name in sorted(topics):
        text = topics[name]
        heads = list(_HEADING.finditer(text))
        for i, m in enumerate(heads):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            yield name, f"{name}#{i}", _words(m.group(1)), _words(text[m.end():end])


def docstring_splits(objects: Iterable | None = None) -> Iterable[tuple[str, str, str, str]]:
    """(group, key, first sentence, the rest) of every standard-library docstring that has both:
    group is the top-level package, key module:qualname."""
    if objects is None:
        objects = documented_objects()
    for module, qualname, _kind, doc in objects:
        m = _SENTENCE.match(_words(_RULE.sub(" ", doc)))
        if m:
            yield module.split(".")[0], f"{module}:{qualname}", m.group(1), m.group(2)


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def doc_pairs(n_train: int, n_test: int, sections: Iterable | None = None,
              docstrings: Iterable | None = None) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows), each row {"query", "passage", "source", "key"}; n_train and n_test
    pairs. sections / docstrings: (group, key, query, passage) tuples (default: topic_sections() and
    docstring_splits()). Raises InputError when a split has fewer pairs than asked."""
    candidates = []
    for source, rows in (("topics", topic_sections() if sections is None else sections),
                         ("docstrings", docstring_splits() if docstrings is None else docstrings)):
        for group, key, query, passage in rows:
            query, words = _words(query), passage.split()
            if len(query.split()) < MIN_QUERY_WORDS or len(words) < MIN_PASSAGE_WORDS:
                continue
            candidates.append((source, group, key, query, " ".join(words[:MAX_PASSAGE_WORDS])))
    queries = Counter(_norm(c[3]) for c in candidates)
    passages = Counter(_norm(c[4]) for c in candidates)
    unique = [c for c in candidates if queries[_norm(c[3])] == 1 and passages[_norm(c[4])] == 1]
    corpus = "\n".join(_norm(c[4]) for c in unique)  # one line per passage: a query spans no two
    kept = [c for c in unique if corpus.count(_norm(c[3])) == _norm(c[4]).count(_norm(c[3]))]  # its own only
    split: dict[str, list] = {"train": [], "test": []}
    for c in kept:
        which = "test" if _hash(f"{c[0]}\0{c[1]}") % 100 < HELD_OUT_PERCENT else "train"
        split[which].append(c)
    out = []
    for which, n in (("train", n_train), ("test", n_test)):
        have = sorted(split[which], key=lambda c: (_hash(c[2]), c[2]))
        if len(have) < n:
            raise InputError(f"the {which} split has {len(have)} pairs, fewer than {n}")
        out.append([{"query": c[3], "passage": c[4], "source": c[0], "key": c[2]} for c in have[:n]])
    return out[0], out[1]


def demo_paths(workdir) -> list:
    """What run_embedding_demo writes under a kept --workdir: the two data files and the run."""
    root = fs.as_path(workdir)
    return [root / "data" / "train.jsonl", root / "data" / "heldout.jsonl", root / "run"]


def check_workdir(workdir) -> None:
    """InputError, before anything is written, when a kept --workdir is a file or already holds what the
    demo would write: it trains from scratch and replaces nothing."""
    root = fs.as_path(workdir)
    if root.exists() and not root.is_dir():
        raise InputError(f"--workdir {root}: exists and is not a folder")
    taken = [os.fspath(p) for p in demo_paths(root) if p.exists()]
    if taken:
        raise InputError(f"--workdir {root}: already holds {', '.join(taken)}; the demo trains from scratch and "
                         f"replaces nothing: pass a new --workdir")


def run_embedding_demo(source, recipe, train_rows: Sequence[dict], test_rows: Sequence[dict], workdir=None,
                       tokenizer=None, log=print) -> dict:
    """Fine-tunes SRC (anything `jaxbert finetune --model` takes) on the training pairs with the recipe
    (`jaxbert finetune --task embedding`'s loop) and scores the held-out pairs by retrieval before the
    first step and at the end of training (not the best evaluation: nothing is picked on held-out
    data). Returns {"source", "before", "after", "steps", "seconds"}; before / after hold recall@1,
    recall@10, MRR@10 and nDCG@10. workdir None: a temporary folder, removed after."""
    if workdir is not None:  # every path checked before the first is written
        check_workdir(workdir)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxbert-embedding-demo-") as tmp:
        root = fs.as_path(workdir) if workdir is not None else Path(tmp)
        train = write_jsonl(root / "data" / "train.jsonl", [{"query": r["query"], "passage": r["passage"]}
                                                             for r in train_rows])
        test = write_jsonl(root / "data" / "heldout.jsonl", [{"query": r["query"], "passage": r["passage"]}
                                                             for r in test_rows])
        spec = parse_task("embedding", train, [test], text_columns=("query", "passage"))
        summary = train_embedding(recipe, spec, source, root / "run", tokenizer=tokenizer, log=log)
    history = summary["history"]
    return {"source": str(source), "before": history[0]["evals"]["heldout"],
            "after": history[-1]["evals"]["heldout"], "steps": summary["step"],
            "seconds": round(time.perf_counter() - t0, 1)}


METRICS = ("ndcg@10", "mrr@10", "recall@1", "recall@10")


def results_table(result: dict, name: str, n_train: int, n_test: int) -> str:
    """The before / after table the demo prints."""
    lines = [f"retrieval of {n_test} held-out queries against their {n_test} pooled passages; {name} fine-tuned on "
             f"{n_train} pairs ({result['steps']} steps, {result['seconds']:.0f} s):",
             f"{'':<24}" + "".join(f"{m:>11}" for m in METRICS)]
    for when in ("before", "after"):
        label = "before fine-tuning" if when == "before" else "after fine-tuning"
        lines.append(f"{label:<24}" + "".join(f"{result[when][m]:11.4f}" for m in METRICS))
    return "\n".join(lines)


# One measured run, quoted by README and docs/embedding.md and printed by the demo when it starts: the
# default sizes at commit f1ccb67 (each column at its own bucket length) took 2 min 19 s of user and 9 s of
# system CPU time (3 min 43 s of wall time, the two cores shared with a load average of 4 to 8).
DEMO_CPU_SECONDS = 148


def estimate(n_train: int) -> str:
    """The CPU time the measured run took, scaled by the training pairs (wall time grows when the cores are shared)."""
    seconds = DEMO_CPU_SECONDS * max(n_train, 1) / DEFAULT_PAIRS[0]
    minutes = max(1, round(seconds / 60))
    return (f"about {minutes} minute{'s' if minutes > 1 else ''} of CPU time (measured: {DEMO_CPU_SECONDS // 60} min "
            f"{DEMO_CPU_SECONDS % 60} s at --pairs {DEFAULT_PAIRS[0]} {DEFAULT_PAIRS[1]}; more wall time where the "
            f"cores are shared)")
