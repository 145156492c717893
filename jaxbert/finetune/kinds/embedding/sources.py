"""The embedding kind's training rows: one --train file or several (data.sources), and which rows each
step's global batch takes.

``read_training`` reads every source with the kind's reader and featurizes them together (source k's
rows are a contiguous range of the joined arrays). ``Schedule`` says which rows step s trains on, as a
function of (seed, s) alone, so a run resumed at any step draws what an uninterrupted one draws:

- each source streams its rows in cycles, each cycle a permutation drawn from (seed, source, cycle);
- steps come in blocks of BLOCK; block b's draws come from (seed, b): with ``batch_per_source`` (and
  for the one --train file) each step draws one source by the weights and takes the whole global batch
  from it, and a cycle holds only the source's full batches (the rows after the last one sit that cycle
  out, so every batch is one source's); without it each step draws how many of its rows each source
  gives (multinomial by the weights) and the sources' streams run on across cycles.

An epoch is the run's rows over the global batch (per source, its full batches, with batch_per_source).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxbert.engine.recipe import RecipeError
from jaxbert.errors import InputError
from jaxbert.finetune.features import Features, bucket_for
from jaxbert.finetune.kinds.embedding.step import by_column
from jaxbert.finetune.loop import fingerprint
from jaxbert.finetune.row_files import local_path

BLOCK = 1024  # steps drawn together: a resume at step s draws s / BLOCK blocks' counts


@dataclasses.dataclass(frozen=True)
class TrainSource:
    """One training file: its name (reports), path, weight, and its rows' range [start, start + rows)."""

    name: str
    path: str
    weight: float
    start: int
    rows: int


@dataclasses.dataclass
class Training:
    """What the run trains on: every source's rows featurized together, the sources and the schedule."""

    features: Features
    sources: list[TrainSource]
    schedule: "Schedule"

    @property
    def per_epoch(self) -> int:
        return self.schedule.per_epoch

    def record(self) -> dict:
        """What a checkpoint must agree on to be resumed (the sources, their weights, the rows' content)."""
        return {"sources": [{"name": s.name, "weight": s.weight, "rows": s.rows} for s in self.sources],
                "batch_per_source": self.schedule.per_source, "steps_per_epoch": self.per_epoch,
                "train_fingerprint": fingerprint(self.features)}

    def batches(self, start: int, buckets, rows: slice = slice(None)):
        """Host batches from step `start` on, in the step's layout (step.by_column: each column's
        input_ids_c / token_type_ids_c / attention_mask_c [1, B', L_c], and valid [1, B']), each column
        cut to the bucket of its longest text in the global batch (B': `rows` of the global batch, this
        process's share), with the schedule's step index."""
        arrays = self.features.arrays
        step = start
        while True:
            index = self.schedule.rows(step)
            batch = {k: v[index] for k, v in arrays.items() if k != "labels"}
            host = {k: v[rows][None] for k, v in batch.items()}
            host["valid"] = np.ones((1, len(index[rows])), np.int32)
            step += 1
            yield by_column(host, column_lengths(batch["attention_mask"], buckets)), step


def column_lengths(attention_mask: np.ndarray, buckets) -> list[int]:
    """Each column's length in a batch: the bucket of its longest text (attention_mask [B, C, L])."""
    return [bucket_for(int(n), buckets) for n in attention_mask.sum(-1).max(0)]


def read_training(spec, data_section, kind, options, tok, max_length: int, batch: int, seed: int) -> Training:
    """Reads --train FILE, or data.sources' files, with the kind's reader and featurizes them; refuses (one
    line) both or neither, a missing file, and a source too small for the schedule."""
    if spec.train is not None and data_section.sources is not None:
        raise RecipeError(f"data.sources: the recipe names its training files, and --train {spec.train} names "
                          "another; give --train FILE or data.sources, not both")
    if data_section.sources is None:
        if spec.train is None:
            raise InputError(f"--task {kind.name} needs --train FILE (or data.sources) and --eval FILE")
        named = [(kind.name, spec.train, 1.0, "--train")]
    else:
        named = [(s.label, s.file, float(s.weight), f"data.sources[{k}].file")
                 for k, s in enumerate(data_section.sources)]
    table = {"text_columns": spec.text_columns, "label_column": spec.label_column}
    examples, sources = [], []
    for name, path, weight, key in named:
        if not local_path(path).is_file():
            raise InputError(f"{key}: {path}: no such file")
        rows = kind.read(path, None, table=table)[0]
        sources.append(TrainSource(name, str(path), weight, len(examples), len(rows)))
        examples += rows
    per_source = bool(data_section.batch_per_source) or len(sources) == 1
    for source, (_, _, _, key) in zip(sources, named):
        if per_source and source.rows < batch:
            where = "" if len(sources) == 1 else f" ({key.rsplit('.', 1)[0]}, {source.name})"
            why = "" if len(sources) == 1 else "; data.batch_per_source draws each batch from one source"
            raise InputError(f"{source.path}{where}: {source.rows} rows, fewer than one global batch of {batch}{why}")
    if len(examples) < batch:
        raise InputError(f"data.sources: {len(examples)} rows in all, fewer than one global batch of {batch}")
    features = kind.featurize(examples, tok, max_length, options)[0]
    return Training(features, sources, Schedule(sources, batch, seed, per_source))


class Schedule:
    """Which rows of the joined arrays each step takes (see the module docstring)."""

    def __init__(self, sources: list[TrainSource], batch: int, seed: int, per_source: bool):
        self.batch, self.seed, self.per_source = batch, seed, per_source
        self.starts = np.array([s.start for s in sources], np.int64)
        self.sizes = np.array([s.rows for s in sources], np.int64)
        # rows of one cycle of each source's stream: its full batches alone when batches are per source
        self.cycle = (self.sizes // batch) * batch if per_source else self.sizes.copy()
        weights = np.array([s.weight for s in sources], np.float64)
        self.p = weights / weights.sum()
        self.per_epoch = int(self.cycle.sum() // batch)
        self._before = [np.zeros(len(sources), np.int64)]  # rows each source gave before block b
        self._blocks: dict[int, np.ndarray] = {}
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def _block(self, b: int) -> np.ndarray:
        """[BLOCK, sources] rows each source gives at each step of block b."""
        if b not in self._blocks:
            rng = np.random.default_rng([self.seed, 1, b])
            if self.per_source:
                which = rng.choice(len(self.p), size=BLOCK, p=self.p)
                counts = np.zeros((BLOCK, len(self.p)), np.int64)
                counts[np.arange(BLOCK), which] = self.batch
            else:
                counts = rng.multinomial(self.batch, self.p, size=BLOCK).astype(np.int64)
            if len(self._blocks) > 4:
                self._blocks.clear()
            self._blocks[b] = counts
        return self._blocks[b]

    def counts(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows each source gave before step, rows each gives at step) for a 0-based step."""
        b, i = divmod(step, BLOCK)
        while len(self._before) <= b:
            self._before.append(self._before[-1] + self._block(len(self._before) - 1).sum(0))
        block = self._block(b)
        return self._before[b] + block[:i].sum(0), block[i]

    def _perm(self, k: int, cycle: int) -> np.ndarray:
        key = (k, cycle)
        if key not in self._perms:
            if len(self._perms) > 4 * len(self.p):
                self._perms.clear()
            self._perms[key] = np.random.default_rng([self.seed, 0, k, cycle]).permutation(int(self.sizes[k]))
        return self._perms[key]

    def rows(self, step: int) -> np.ndarray:
        """[B] row indices (into the joined arrays) of a 0-based step's global batch, source by source."""
        before, now = self.counts(step)
        out = []
        for k in np.flatnonzero(now):
            positions = before[k] + np.arange(now[k])
            cycles, at = np.divmod(positions, self.cycle[k])
            for c in np.unique(cycles):
                out.append(self.starts[k] + self._perm(k, int(c))[at[cycles == c]])
        return np.concatenate(out)
