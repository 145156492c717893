"""Where training batches come from.

``make_source`` returns an iterator of NumPy batch dicts with ``state()`` and
``restore(state)``: the prepared-data loader (jaxbert.data.loader.MLMLoader)
or ``SyntheticMLM``, a learnable in-memory source for tests and benchmarks
that needs no tokenizer. ``ensure_data`` builds the tokenizer and the prepared
data from the embedded corpus into the workdir when a recipe names no data
directory (the tiny-demo case), and reuses them on the next run.
"""

from __future__ import annotations

import json
from pathlib import Path
import time

import numpy as np

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.data import prepare, tokenizer
from jaxbert.data.tokenizer import special_token_ids, tokenizer_hash
from jaxbert.data.loader import DataCompatibilityError, MLMLoader, check_compatible, check_mixture, mixture_weights
from jaxbert.data.masking import masked_slots
from jaxbert.model.families import family_of
from jaxbert.train.recipe import Recipe, RecipeError

# Special ids of the synthetic vocabulary, as a freshly trained WordPiece orders them.
PAD, UNK, CLS, SEP, MASK = range(5)


class SyntheticMLM:
    """Each sequence mixes two tokens drawn with Zipf weights: a model first
    learns the skewed unigram distribution (the loss leaves log(V) within a few
    steps), then that a masked token is one of the two the sequence shows
    (towards log 2). Example i of the
    stream depends only on (seed, split, i), so P processes reading shards of
    the global batch see exactly the rows one process would see, and the
    position (examples consumed) resumes under any batch size or host count.

    Yields int32 input_ids/token_type_ids/attention_mask [B, L], masked_positions/
    masked_labels [B, M], float32 masked_weights [B, M] (+ next_sentence_labels [B]).
    """

    def __init__(self, vocab_size: int, batch_size: int, seq_len: int, *, seed: int = 0,
                 split: str = "train", mask_rate: float = 0.15, max_predictions: int | None = None,
                 process_index: int = 0, process_count: int = 1, nsp: bool = False):
        self.vocab_size, self.batch_size, self.seq_len = vocab_size, batch_size, seq_len
        self.seed, self.mask_rate, self.nsp = seed, mask_rate, nsp
        self.split_id = 0 if split == "train" else 1
        self.max_predictions = masked_slots(seq_len, mask_rate, max_predictions)
        self.process_index, self.process_count = process_index, process_count
        self.global_batch_size = batch_size * process_count
        self.position = 0  # examples of the stream consumed, by every process together

    def state(self) -> dict:
        return {"position": self.position, "seed": self.seed}

    def restore(self, state) -> None:
        """Continue at the example a state records, whatever batch size or host count took it there.
        A state from before positions ([batches]) is read as batches of this source's global size."""
        if isinstance(state, (list, tuple)):
            self.position = int(state[0]) * self.global_batch_size
            return
        if int(state.get("seed", self.seed)) != self.seed:
            raise RecipeError(f"train.seed: {state['seed']} in the checkpoint, {self.seed} now: the synthetic "
                              f"stream would differ from the run being resumed (--set train.seed={state['seed']} "
                              "resumes it, a new --workdir starts a new run)")
        self.position = int(state["position"])

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        first = self.position + self.process_index * self.batch_size
        rows = [self._example(first + r) for r in range(self.batch_size)]
        self.position += self.global_batch_size
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}

    def take(self, n: int) -> dict:
        """n batches stacked [n, B, ...]: what n calls of next() return."""
        parts = [next(self) for _ in range(n)]
        return {k: np.stack([p[k] for p in parts]) for k in parts[0]}

    def _example(self, index: int) -> dict:
        rng = np.random.default_rng([self.seed, self.split_id, index])
        L, M, V = self.seq_len, self.max_predictions, self.vocab_size
        length = int(rng.integers(L // 2, L + 1))
        zipf = 1.0 / np.arange(1, V - 4)  # token 5 + k drawn with weight 1 / (k + 1)
        pair = rng.choice(np.arange(5, V), 2, replace=False, p=zipf / zipf.sum())
        ids = np.full(L, PAD, np.int32)
        ids[1:length - 1] = pair[rng.integers(0, 2, length - 2)]
        ids[0], ids[length - 1] = CLS, SEP
        n = min(M, max(1, int(round((length - 2) * self.mask_rate))))
        pos = np.sort(rng.choice(np.arange(1, length - 1), n, replace=False)).astype(np.int32)
        labels = ids[pos].copy()
        ids[pos] = MASK
        out = {"input_ids": ids, "token_type_ids": np.zeros(L, np.int32),
               "attention_mask": (np.arange(L) < length).astype(np.int32),
               "masked_positions": np.pad(pos, (0, M - n)),
               "masked_labels": np.pad(labels, (0, M - n)),
               "masked_weights": np.pad(np.ones(n, np.float32), (0, M - n))}
        if self.nsp:
            out["next_sentence_labels"] = np.int32(pair[0] > pair[1])  # learnable from the sequence
        return out


def check_data(recipe: Recipe, workdir: str | Path | None = None) -> None:
    """What can be refused before a run writes anything: a mixture's folders exist and share one
    tokenizer, row length, format and packing; a workdir's checkpoint resumes only on the mixture
    (sources, weights, data) it was saved with (RecipeError or DataCompatibilityError naming the source)."""
    d = recipe.data
    saved = workdir_lib.recorded_loader(workdir) if workdir is not None and fs.as_path(workdir).is_dir() else None
    if not d.sources and not (isinstance(saved, dict) and "sources" in saved):
        return
    for k, source in enumerate(d.sources or ()):  # typed and checked when the recipe was read (SourceSection)
        if not fs.as_path(source.dir).is_dir():
            raise RecipeError(f"data.sources[{k}].dir: {source.dir} does not exist; build it with "
                              "`jaxbert data prepare`")
    if d.sources:
        check_mixture(d.source_dirs(), seq_len=d.seq_len, packing=d.packing)
    if isinstance(saved, dict) and (d.sources or d.dir is not None):  # the loader's own resume checks, now
        make_source(recipe, d.source_dirs() if d.sources else d.dir, 1).restore(saved)


def ensure_data(recipe: Recipe, workdir: str | Path, log=print) -> tuple[str | list[str], str]:
    """(data dir, tokenizer dir) for a 'prepared' recipe, building both in
    WORKDIR/tokenizer and WORKDIR/data from the embedded corpus when data.dir is unset.
    A mixture's data dir is the list of its folders (the tokenizer: data.tokenizer or the first's): the
    caller has checked them (check_data, before anything is written), so they are not read again here."""
    d = recipe.data
    if d.sources:
        return d.source_dirs(), tokenizer_dir(recipe, workdir)
    if d.dir is not None:
        if not fs.as_path(d.dir).is_dir():
            raise RecipeError(f"data.dir: {d.dir} does not exist; build it with `jaxbert data prepare` "
                              f"(see the recipe's comments) or leave data.dir unset for the embedded corpus")
        return d.dir, tokenizer_dir(recipe, workdir)
    workdir = fs.as_path(workdir)
    tok_dir = fs.as_path(d.tokenizer) if d.tokenizer else workdir_lib.path(workdir, workdir_lib.TOKENIZER)
    data_dir = workdir_lib.path(workdir, workdir_lib.DATA)
    if not (tok_dir / "tokenizer.json").exists() and d.tokenizer is None:
        name = tokenizer.TOKENIZER_KINDS[d.tokenizer_kind].name
        log(f"tokenizer: training {name} (vocab {d.vocab_size}) on the embedded corpus -> {tok_dir}")
        t = time.time()
        tokenizer.train_tokenizer(None, d.vocab_size, tok_dir, kind=d.tokenizer_kind)
        log(f"tokenizer: done in {time.time() - t:.1f} s")
    elif d.tokenizer is None:  # trained here by an earlier run: the kind the recipe asks for
        found = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8")).get("model", {}).get("type")
        want = tokenizer.TOKENIZER_KINDS[d.tokenizer_kind].model_type
        if found != want:
            raise RecipeError(f"data.tokenizer_kind: {d.tokenizer_kind}, but {tok_dir} holds a {found} tokenizer "
                              f"trained by an earlier run; use a fresh --workdir")
    if not data_dir.exists():
        how = "" if d.packing == "stream" else f" (packing {d.packing})"
        log(f"data: tokenizing and packing the embedded corpus into rows of {d.seq_len}{how} -> {data_dir}")
        t = time.time()
        prepare.prepare(inputs=None, tokenizer=str(tok_dir), output=str(data_dir), max_length=d.seq_len,
                        format="nsp" if d.nsp else "mlm", validation_fraction=d.validation_fraction,
                        for_workdir=str(workdir), packing=d.packing)
        log(f"data: done in {time.time() - t:.1f} s ({_describe(data_dir)})")
    return str(data_dir), str(tok_dir)


def _describe(data_dir: Path) -> str:
    meta = json.loads((data_dir / "metadata.json").read_text())
    return ", ".join(f"{k} {v['examples']} rows of {v['documents']} documents"
                     for k, v in meta["splits"].items())


def tokenizer_dir(recipe: Recipe, workdir: str | Path) -> str | None:
    """Where a run's tokenizer lives (see jaxbert.workdir.run_tokenizer_dir)."""
    path = workdir_lib.run_tokenizer_dir(recipe.to_dict()["data"], workdir)
    return None if path is None else str(path)


def make_source(recipe: Recipe, data_dir: str | None, batch_size: int, *, split: str = "train",
                process_index: int = 0, process_count: int = 1, fixed_masking: bool = False,
                vocab_size: int | None = None):
    """A batch iterator with state()/restore() for this process's rows."""
    d, seed = recipe.data, recipe.train.seed
    mask_rate, slots = d.split_mask_rate(split), d.masked_slots(split)
    if d.source == "synthetic":
        return SyntheticMLM(vocab_size, batch_size, d.seq_len, seed=seed, split=split,
                            mask_rate=mask_rate, max_predictions=slots,
                            process_index=process_index, process_count=process_count,
                            nsp=d.nsp)
    mixture = {"weights": d.source_weights(), "temperature": d.temperature, "names": d.source_names()} \
        if d.sources else {}
    return MLMLoader(data_dir, batch_size, d.seq_len, seed=seed, split=split, mask_rate=mask_rate,
                     max_predictions=slots, whole_word_mask=d.whole_word_mask,
                     process_index=process_index, process_count=process_count,
                     fixed_masking=fixed_masking, **mixture)


def held_out_sources(recipe: Recipe, batch_size: int, *, process_index: int = 0, process_count: int = 1) -> list:
    """A mixture's held-out splits, each read whole (train.eval_batches 0): [(name, share of the mixture,
    loader)] with each loader's ``whole()`` batches; the shares are the mixture's proportions (its weights,
    or the training rows to data.temperature), which weigh the sources' figures into the mixture's."""
    d = recipe.data
    dirs = d.source_dirs()
    weights = mixture_weights(check_mixture(dirs), d.source_weights(), d.temperature)
    total = sum(weights)
    out = []
    for k, (name, folder, weight) in enumerate(zip(d.source_names(), dirs, weights)):
        try:
            loader = MLMLoader(folder, batch_size, d.seq_len, seed=recipe.train.seed, split="validation",
                               mask_rate=d.split_mask_rate("validation"), max_predictions=d.masked_slots("validation"),
                               whole_word_mask=d.whole_word_mask, process_index=process_index,
                               process_count=process_count, fixed_masking=True, shuffle=False)
        except DataCompatibilityError as e:
            raise DataCompatibilityError(f"data.sources[{k}]: {e}") from None
        out.append((name, weight / total, loader))
    return out


def check_fits(cfg, tok, data_dir, packing: str | None = None) -> None:
    """A model, tokenizer and prepared data that do not fit each other stop here, named."""
    folders = data_dir if isinstance(data_dir, list) else [data_dir]  # every source of a mixture
    metas = [check_compatible(folder, vocab_size=cfg.vocab_size, tokenizer_hash=tokenizer_hash(tok), packing=packing)
             for folder in folders]
    # the pad id the data was prepared with: read beside the tokenizer's own files (RoBERTa's '<pad>'),
    # which the data folder's tokenizer.json alone does not name
    pad = metas[0].get("special_ids", {}).get("pad")
    pad = special_token_ids(tok)["pad"] if pad is None else pad
    if family_of(cfg).pad_is_position_origin and cfg.pad_token_id != pad:  # positions count from [PAD]
        raise RecipeError(f"model.config.pad_token_id: {cfg.pad_token_id}, but the tokenizer's pad token "
                          f"is {pad}; a {cfg.model_type} model needs them equal")
