"""Masked batches from a prepared folder: a seeded stream of sequences, sharded by host.

The stream is the concatenation of one seeded permutation of the split per epoch: sequence k of
the stream is perm_e[k - e*N] with e = k // N (N examples in the split), so every sequence comes
once per epoch. A loader's position is the number of sequences consumed from the stream, recorded
as (epoch, offset into that epoch's permutation). A step reads the next G = batch_size *
process_count sequences (a step may end one epoch and begin the next); process p takes the p-th
slice of B rows. Masking depends only on (seed, epoch, example index) (see masking.py).

So what a run sees does not depend on how it is split: a run resumed with another batch size,
accumulation, device count or host count continues at the same sequence, and sees the sequences
(masked the same way) that an uninterrupted run would have seen. A changed seed or a changed
split would not continue the stream; ``restore`` refuses them by name.

A mixture reads several prepared folders (one tokenizer, one row length): row k of the stream
comes from the source that jaxbert.data.mixture's seeded schedule names, as that source's next
row; each source keeps its own seeded permutation per epoch and its own epoch count. The position
is still one number, and the stream depends only on (seed, sources, weights), so a mixture resumes
as exactly and as elastically as one folder; a resume with other sources or weights is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jaxbert import fs
from jaxbert.data.masking import mask_tokens, masked_slots, row_keys
from jaxbert.data.mixture import Schedule, shares, temperature_weights
from jaxbert.data.remote import open_rows
from jaxbert.errors import InputError

SUPPORTED_FORMAT_VERSIONS = (1,)


class DataCompatibilityError(InputError):
    """Prepared data that this code, or this model, cannot use."""


def metadata(data_dir: str | Path) -> dict:
    """The metadata.json of a prepared folder (vocab_size, special_ids, tokenizer_hash, format, ...)."""
    path = fs.require_complete(data_dir) / "metadata.json"
    if not path.is_file():
        raise DataCompatibilityError(f"{data_dir} is not a prepared dataset ({path.name} missing); "
                                     f"run `jaxbert data prepare` first")
    meta = json.loads(path.read_text())
    if meta.get("format_version") not in SUPPORTED_FORMAT_VERSIONS:
        raise DataCompatibilityError(f"{path}: format_version {meta.get('format_version')} is not one of "
                                     f"{SUPPORTED_FORMAT_VERSIONS}; prepare the data again")
    return meta


def _padded(data_vocab: int, model_vocab: int) -> bool:
    """Whether model_vocab is data_vocab rounded up to a multiple of 8..256 (a padded embedding)."""
    return model_vocab > data_vocab and any(model_vocab == -(-data_vocab // m) * m for m in (8, 16, 32, 64, 128, 256))


def packing_of(meta: dict) -> str:
    """How a prepared folder's mlm rows were made: stream (recorded by its absence, as in data
    prepared before the option existed), documents or none (see jaxbert.data.prepare.PACKINGS)."""
    return meta.get("packing", "stream")


def check_compatible(data_dir: str | Path, vocab_size: int | None = None,
                     tokenizer_hash: str | None = None, packing: str | None = None) -> dict:
    """Raise DataCompatibilityError unless a model with `vocab_size` (equal, or padded up to a
    multiple of 8..256) and a tokenizer hashing to `tokenizer_hash` can train on this data, and
    (given) its rows were packed as `packing` says. Returns the metadata."""
    meta = metadata(data_dir)
    if packing is not None and packing_of(meta) != packing:
        raise DataCompatibilityError(
            f"{data_dir} was prepared with packing {packing_of(meta)!r}, but the recipe asks for data.packing "
            f"{packing!r}: set data.packing={packing_of(meta)}, or prepare the data again with --packing {packing} "
            "(in a new --workdir when it was built there)")
    data_vocab, data_hash = meta["vocab_size"], meta["tokenizer_hash"]
    if vocab_size is not None and vocab_size != data_vocab and not _padded(data_vocab, vocab_size):
        raise DataCompatibilityError(
            f"{data_dir} was prepared with a {data_vocab}-token vocabulary (tokenizer {meta['tokenizer']}, "
            f"sha256 {data_hash[:12]}), but the model has vocab_size {vocab_size}: prepare the data with "
            f"the model's tokenizer, or set vocab_size to {data_vocab}")
    if tokenizer_hash is not None and tokenizer_hash != data_hash:
        raise DataCompatibilityError(
            f"{data_dir} was prepared with tokenizer {meta['tokenizer']} (sha256 {data_hash[:12]}), which "
            f"differs from the model's (sha256 {tokenizer_hash[:12]}): prepare the data with the model's tokenizer")
    return meta


def continuation_table(data_dir: str | Path, vocab_size: int) -> np.ndarray:
    """bool [V]: True for WordPiece continuation pieces (`##...`) of the data's tokenizer."""
    spec = json.loads((fs.as_path(data_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec.get("model", {})
    if model.get("type") != "WordPiece":
        raise DataCompatibilityError(f"whole-word masking needs a WordPiece tokenizer; {data_dir} used "
                                     f"{model.get('type')}")
    prefix = model.get("continuing_subword_prefix") or "##"
    table = np.zeros(vocab_size, bool)
    for token, i in model["vocab"].items():
        if token.startswith(prefix) and len(token) > len(prefix) and i < vocab_size:
            table[i] = True
    return table


def source_name(data_dir) -> str:
    """A mixture source's default name: its folder's name (metric keys tokens/NAME, epochs/NAME)."""
    return fs.as_path(data_dir).name or str(data_dir)


def check_mixture(dirs: list, seq_len: int | None = None, packing: str | None = None) -> list[dict]:
    """The metadata of every source of a mixture; DataCompatibilityError naming the source
    (data.sources[k]) whose tokenizer, row length, format or packing differs from the first's."""
    metas = []
    for k, d in enumerate(dirs):
        where = f"data.sources[{k}] ({d})"
        try:
            meta = metadata(d)
        except DataCompatibilityError as e:
            raise DataCompatibilityError(f"data.sources[{k}]: {e}") from None
        if seq_len is not None and meta["max_length"] != seq_len:
            raise DataCompatibilityError(f"{where} holds rows of {meta['max_length']} tokens, but data.seq_len is "
                                         f"{seq_len}: prepare it again with --max-length {seq_len}")
        if metas:
            first, here = metas[0], meta
            for key, what in (("tokenizer_hash", "tokenizer"), ("max_length", "row length"), ("format", "format")):
                if here[key] != first[key]:
                    mine, theirs = here[key], first[key]
                    if key == "tokenizer_hash":
                        mine = f"{here['tokenizer']} (sha256 {mine[:12]})"
                        theirs = f"{first['tokenizer']} (sha256 {theirs[:12]})"
                    raise DataCompatibilityError(
                        f"{where}: {what} {mine}, but data.sources[0] ({dirs[0]}) has {theirs}: every source of a "
                        f"mixture must be prepared with one tokenizer, row length and format")
            if packing_of(here) != packing_of(first):
                raise DataCompatibilityError(
                    f"{where}: packing {packing_of(here)!r}, but data.sources[0] ({dirs[0]}) has "
                    f"{packing_of(first)!r}: every source of a mixture must be packed alike")
        if packing is not None and packing_of(meta) != packing:
            raise DataCompatibilityError(f"{where} was prepared with packing {packing_of(meta)!r}, but the recipe "
                                         f"asks for data.packing {packing!r}")
        metas.append(meta)
    return metas


def mixture_weights(metas: list[dict], weights=None, temperature: float | None = None) -> list[float]:
    """Each source's weight: as given, or its training rows to the power `temperature`."""
    if temperature is not None:
        return temperature_weights([m["splits"]["train"]["examples"] for m in metas], temperature)
    if weights is None or len(weights) != len(metas):
        raise ValueError(f"a mixture of {len(metas)} sources needs as many weights, got {weights}")
    return [float(w) for w in weights]


def _distinct_percents(a: float, b: float) -> tuple[str, str]:
    """Two shares as percentages with two decimals, or as many more as it takes to tell them apart."""
    for digits in range(2, 16):
        x, y = f"{a:.{digits}%}", f"{b:.{digits}%}"
        if x != y:
            break
    return x, y


def _renamed(state: dict, names: list, examples) -> str:
    """A hint when a resume's sources differ only by name: the same count of sources, the same rows in
    each, so a folder likely moved and took its default name (the folder's) with it."""
    saved = list(state["sources"])
    if len(saved) != len(names) or [int(n) for n in state.get("examples", ())] != [int(n) for n in examples]:
        return ""
    moved = [k for k, (was, now) in enumerate(zip(saved, names)) if was != now]
    keys = ", ".join(f"data.sources[{k}].name: {saved[k]}" for k in moved)
    return (f"if only the folder{'s' if len(moved) > 1 else ''} moved (a source's default name is its folder's), "
            f"{keys} resumes this run on the same rows; otherwise ")


class MLMLoader:
    """Iterate dicts of NumPy arrays for this process (B = batch_size rows):

    input_ids, token_type_ids, attention_mask: int32 [B, L]; masked_positions, masked_labels:
    int32 [B, M]; masked_weights: float32 [B, M]; nsp data also next_sentence_labels int32 [B]
    (0: B follows A, 1: random); data packed as documents or none also segment_ids int32 [B, L]
    (0 = padding, 1..k = the documents of the row). Iteration never ends; an epoch takes about `steps_per_epoch` steps
    (N // G; a step may straddle two epochs).

    data_dir: one prepared folder, or a list of them: a mixture, with `weights` (one per folder, each
    > 0) or `temperature` (weights = training rows ** temperature), and `names` for its reports.
    Example indices then run over the folders in order (folder k's rows after those of folders < k).
    """

    def __init__(self, data_dir, batch_size: int, seq_len: int | None = None, *, seed: int = 0,
                 split: str = "train", mask_rate: float = 0.15, max_predictions: int | None = None,
                 whole_word_mask: bool = False, process_index: int = 0, process_count: int = 1,
                 fixed_masking: bool = False, state: dict | None = None, shuffle: bool = True,
                 replace_rate: float = 0.8, random_rate: float = 0.1, weights=None,
                 temperature: float | None = None, names=None):
        self.mixture = isinstance(data_dir, (list, tuple))
        dirs = list(data_dir) if self.mixture else [data_dir]
        self.data_dirs = [fs.as_path(d) for d in dirs]
        self.data_dir = self.data_dirs[0]
        metas = check_mixture(dirs) if self.mixture else [metadata(data_dir)]
        self.meta = meta = metas[0]
        self.names = list(names) if names is not None else [source_name(d) for d in dirs]
        L = meta["max_length"]
        if seq_len is not None and seq_len != L:
            raise DataCompatibilityError(f"{dirs[0]} holds rows of {L} tokens, not {seq_len}: prepare "
                                         f"it again with --max-length {seq_len}")
        for d, m in zip(dirs, metas):
            if split not in m["splits"]:
                raise DataCompatibilityError(f"{d} has no split {split!r} (has {sorted(m['splits'])})")
        if not 0 <= process_index < process_count:
            raise ValueError(f"process_index {process_index} is not in [0, {process_count})")
        if not 0.0 <= mask_rate <= 1.0:
            raise ValueError(f"mask_rate must be in [0, 1], got {mask_rate}")
        self.seq_len, self.batch_size, self.seed, self.split = L, batch_size, seed, split
        self.process_index, self.process_count = process_index, process_count
        self.mask_rate, self.fixed_masking, self.shuffle = mask_rate, fixed_masking, shuffle
        self.replace_rate, self.random_rate = replace_rate, random_rate
        self.nsp = meta["format"] == "nsp"
        self.max_predictions = masked_slots(L, mask_rate, max_predictions, whole_word_mask)

        # every folder's shards, folder after folder: one index space over all sources
        shards = [(d, s) for d, m in zip(self.data_dirs, metas) for s in m["splits"][split]["shards"]]
        # a local shard is memory-mapped; one in a bucket is read by row ranges (only this host's rows)
        self._rows = [open_rows(d / s["file"]) for d, s in shards]
        self._pairs = None
        if self.nsp:  # (tokens in A, label) per row
            self._pairs = [open_rows(d / s["file"].replace(".npy", "-pairs.npy")) for d, s in shards]
        self.packing = packing_of(meta)
        self._segments = None
        if self.packing != "stream":  # segment ids per token, beside the rows
            self._segments = [open_rows(d / s["file"].replace(".npy", "-segments.npy")) for d, s in shards]
        sizes = np.array([len(r) for r in self._rows], np.int64)
        self._ends = np.cumsum(sizes)
        self.num_examples = int(sizes.sum())
        folder = np.array([k for k, m in enumerate(metas) for _ in m["splits"][split]["shards"]], np.int64)
        self.source_examples = np.bincount(folder, weights=sizes, minlength=len(dirs)).astype(np.int64)
        self._first = np.cumsum(self.source_examples) - self.source_examples  # each source's first index
        self.global_batch_size = batch_size * process_count
        self.steps_per_epoch = self.num_examples // self.global_batch_size
        if self.steps_per_epoch == 0:
            raise DataCompatibilityError(
                f"split {split!r} of {', '.join(map(str, dirs))} has {self.num_examples} examples, fewer than one "
                f"global batch of {self.global_batch_size}")
        for d, n in zip(dirs, self.source_examples):
            if n == 0:
                raise DataCompatibilityError(f"split {split!r} of {d} holds no rows")
        self.temperature, self.schedule = temperature, None
        if self.mixture:  # proportions from the training split, whichever split this reads
            self.schedule = Schedule(shares(mixture_weights(metas, weights, temperature)), seed)

        V, ids = meta["vocab_size"], meta["special_ids"]
        self._never = np.zeros(V, bool)
        self._never[[ids["cls"], ids["sep"], ids["pad"]]] = True
        self._random_ids = np.setdiff1d(np.arange(V), list(ids.values())).astype(np.int32)
        self._continuation = continuation_table(dirs[0], V) if whole_word_mask else None  # one tokenizer for all
        self._perms: dict[tuple[int, int], np.ndarray] = {}  # (source, epoch) -> permutation; two epochs a source
        self.position = 0  # sequences consumed from the stream, by every process together
        if state is not None:
            self.restore(state)

    # ---- state ----
    @property
    def step(self) -> int:
        """Batches of this loader's global batch size consumed (exact while it has not changed)."""
        return self.position // self.global_batch_size

    def state(self, step: int | None = None) -> dict:
        """A few ints for a checkpoint: the position in the stream as (epoch, offset), and what the
        stream depends on; a mixture's records the position, its sources, their shares and sizes.
        `step`: the position after that many batches of this loader's size."""
        position = self.position if step is None else int(step) * self.global_batch_size
        if self.mixture:
            return {"position": position, "seed": self.seed, "sources": list(self.names),
                    "shares": list(self.schedule.shares), "examples": [int(n) for n in self.source_examples]}
        epoch, offset = divmod(position, self.num_examples)
        return {"epoch": epoch, "offset": offset, "seed": self.seed, "examples": self.num_examples}

    def restore(self, state: dict) -> None:
        """Continue at the position a state records, whatever batch size or host count took it there.
        Also reads states of the loaders before positions ({"step", "global_batch_size"}: each epoch
        held `N // global_batch_size` steps)."""
        if "seed" in state and int(state["seed"]) != self.seed:
            raise DataCompatibilityError(
                f"train.seed: {state['seed']} in the checkpoint, {self.seed} now: the shuffled order of "
                f"{self.data_dir} would differ from the run being resumed (--set train.seed={state['seed']} "
                "resumes it, a new --workdir starts a new run)")
        if self.mixture or "sources" in state:
            self._restore_mixture(state)
            return
        if "examples" in state and int(state["examples"]) != self.num_examples:
            raise DataCompatibilityError(
                f"{self.data_dir}: split {self.split!r} holds {self.num_examples} examples, the run being resumed "
                f"read one of {state['examples']}: the prepared data changed; resume on the data it was "
                "trained on, or train in a new --workdir")
        if "offset" in state:
            epoch, offset = int(state["epoch"]), int(state["offset"])
        else:  # a loader state from before positions: steps of one global batch size, remainders dropped
            gbs = int(state.get("global_batch_size", self.global_batch_size))
            spe = self.num_examples // gbs
            if spe == 0:
                raise DataCompatibilityError(f"{self.data_dir}: the checkpoint's loader state (global batch {gbs}) "
                                             f"does not fit a split of {self.num_examples} examples")
            epoch, j = divmod(int(state["step"]), spe)
            offset = j * gbs
        self.position = epoch * self.num_examples + offset

    def _restore_mixture(self, state: dict) -> None:
        """A mixture resumes only on the sources, weights and data it was saved with, each named."""
        new_run = ("a new mixture or new weights is a new run: train in a new --workdir with "
                   "model.init_from=<this workdir> (as a next phase does)")
        if "sources" not in state:
            raise DataCompatibilityError(f"data.sources: the run being resumed read one folder (data.dir), this "
                                         f"recipe a mixture of {self.names}; {new_run}")
        if not self.mixture:
            raise DataCompatibilityError(f"data.dir: the run being resumed read the mixture {state['sources']}, this "
                                         f"recipe one folder ({self.data_dir}); {new_run}")
        if list(state["sources"]) != self.names:
            raise DataCompatibilityError(f"data.sources: the run being resumed read {state['sources']}, this recipe "
                                         f"names {self.names}; {_renamed(state, self.names, self.source_examples)}"
                                         f"{new_run}")
        saved = [int(w) for w in state["shares"]]
        if saved != list(self.schedule.shares):
            now = [w / self.schedule.total for w in self.schedule.shares]
            # named: the source whose share moved most, relative to what it was
            k = max(range(len(saved)), key=lambda i: abs(now[i] * sum(saved) / saved[i] - 1))
            key = "data.temperature" if self.temperature is not None else f"data.sources[{k}].weight"
            was, here = _distinct_percents(saved[k] / sum(saved), now[k])
            raise DataCompatibilityError(f"{key}: the run being resumed drew {was} of its rows "
                                         f"from {self.names[k]}, this recipe {here}; {new_run}")
        for k, (was, now) in enumerate(zip(state["examples"], self.source_examples)):
            if int(was) != int(now):
                raise DataCompatibilityError(
                    f"data.sources[{k}] ({self.data_dirs[k]}): split {self.split!r} holds {now} examples, the run "
                    f"being resumed read one of {was}: the prepared data changed; resume on the data it was "
                    "trained on, or train in a new --workdir")
        self.position = int(state["position"])

    def source_rows(self, state: dict | None = None) -> dict[str, tuple[int, int]]:
        """A mixture's sources: name -> (rows read from it, rows in its split) at a state's position
        (this loader's by default); {} for one folder."""
        if not self.mixture:
            return {}
        read = self.schedule.consumed(self.position if state is None else int(state["position"]))
        return {name: (int(r), int(n)) for name, r, n in zip(self.names, read, self.source_examples)}

    # ---- batches ----
    def __iter__(self):
        return self

    def __next__(self) -> dict:
        batch = self.batch_at_position(self.position)
        self.position += self.global_batch_size
        return batch

    def _perm(self, epoch: int, source: int = 0) -> np.ndarray:
        """A source's permutation of its rows in an epoch; the first source's key is a lone folder's."""
        if (source, epoch) not in self._perms:
            n = int(self.source_examples[source])
            # int32 where it fits: 4 bytes per example, held for the epoch (and the one after it)
            perm = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
            if self.shuffle:
                np.random.default_rng([self.seed, epoch, 0x5EED] + ([source] if source else [])).shuffle(perm)
            self._perms = {k: p for k, p in self._perms.items() if k[0] != source or k[1] == epoch - 1}
            self._perms[(source, epoch)] = perm
        return self._perms[(source, epoch)]

    def stream(self, position: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(example index, epoch of its source) of sequences position .. position + count - 1 of the stream."""
        if self.mixture:
            source, row = self.schedule.locate(position, count)
        else:
            source, row = np.zeros(count, np.int32), np.arange(int(position), int(position) + count, dtype=np.int64)
        size = self.source_examples[source]
        epochs = row // size
        index = np.empty(count, np.int64)
        for s, e in np.unique(np.stack([source.astype(np.int64), epochs]), axis=1).T:
            s, e = int(s), int(e)
            sel = (source == s) & (epochs == e)
            index[sel] = self._first[s] + self._perm(e, s)[row[sel] - e * size[sel]]
        return index, epochs

    def _mine(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(example index, epoch) of the rows this process reads at a global position."""
        return self.stream(int(position) + self.process_index * self.batch_size, self.batch_size)

    def example_indices(self, step: int) -> np.ndarray:
        """int [B]: indices into the split of the rows this process reads at `step` (batches of this size)."""
        return self._mine(int(step) * self.global_batch_size)[0]

    def _gather(self, index: np.ndarray, tables: list[np.ndarray]) -> np.ndarray:
        """Rows of the split at `index`, read shard by shard in ascending order (memmap friendly)."""
        shard = np.searchsorted(self._ends, index, side="right")
        local = index - (self._ends - [len(t) for t in tables])[shard]
        out = np.empty((len(index),) + tables[0].shape[1:], tables[0].dtype)
        for s in np.unique(shard):
            sel = np.flatnonzero(shard == s)
            order = np.argsort(local[sel])
            out[sel[order]] = tables[s][local[sel][order]]
        return out

    def batch_at(self, step: int) -> dict:
        """The batch this process gets at `step` of a run that kept this loader's batch size."""
        return self.batch_at_position(int(step) * self.global_batch_size)

    def take(self, n: int) -> dict:
        """n batches in one read, stacked [n, B, ...]: what n calls of next() return (the same rows,
        masked the same way), gathered and masked together (a step's accumulation micro-batches)."""
        parts = [self._mine(self.position + i * self.global_batch_size) for i in range(n)]
        batch = self._batch(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        self.position += n * self.global_batch_size
        return {k: v.reshape(n, self.batch_size, *v.shape[1:]) for k, v in batch.items()}

    def whole(self):
        """The split read once, whole, in batches of this loader's size: the last batch filled with rows of the
        next pass that weigh nothing (zero masked weights; NSP: next_sentence_weights 0), so one shape serves."""
        for position in range(0, self.num_examples, self.global_batch_size):
            index, epochs = self._mine(position)
            batch, first = self._batch(index, epochs), (epochs == 0).astype(np.float32)
            batch["masked_weights"] = batch["masked_weights"] * first[:, None]
            if self.nsp:
                batch["next_sentence_weights"] = first
            yield batch

    def batch_at_position(self, position: int) -> dict:
        """The batch this process gets when `position` sequences of the stream are consumed;
        a pure function of the constructor arguments and the position."""
        return self._batch(*self._mine(position))

    def _batch(self, index: np.ndarray, epochs: np.ndarray) -> dict:
        """The masked rows of the split at `index` (their epochs key the masking)."""
        ids = self._gather(index, self._rows).astype(np.int32)
        keys = np.empty(len(index), np.uint64)
        for e in np.unique(epochs):  # a batch may end one epoch and begin the next
            sel = epochs == e
            keys[sel] = row_keys(self.seed, 0 if self.fixed_masking else int(e), index[sel])
        batch = mask_tokens(ids, keys, mask_rate=self.mask_rate, mask_id=self.meta["special_ids"]["mask"],
                            never_mask=self._never, random_ids=self._random_ids,
                            max_predictions=self.max_predictions, continuation=self._continuation,
                            replace_rate=self.replace_rate, random_rate=self.random_rate)
        batch["attention_mask"] = (ids != self.meta["special_ids"]["pad"]).astype(np.int32)
        if self.nsp:
            pairs = self._gather(index, self._pairs).astype(np.int32)
            # segment B (and its [SEP]) starts after [CLS] A [SEP]
            second = np.arange(self.seq_len)[None, :] >= (pairs[:, :1] + 2)
            batch["token_type_ids"] = (second & (batch["attention_mask"] > 0)).astype(np.int32)
            batch["next_sentence_labels"] = pairs[:, 1].copy()
        else:
            batch["token_type_ids"] = np.zeros_like(ids)
        if self._segments is not None:
            batch["segment_ids"] = self._gather(index, self._segments).astype(np.int32)
        return batch
