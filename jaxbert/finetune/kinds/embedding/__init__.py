"""Embedding models: an encoder trained contrastively to map texts to unit vectors.

Rows name an anchor, its positive and zero or more hard negatives (`--text-columns query passage
[negative ...]`); every text is encoded alone (each column's prefix from `kinds.embedding.prefixes`
put in front), pooled (`pooling`: mean, cls or last) and L2-normalised. The loss
(jaxbert.finetune.kinds.embedding.loss) is InfoNCE of each anchor over every candidate of the global
batch, positives and hard negatives alike, at a fixed temperature or a learned one, with an optional
symmetric term and Matryoshka prefixes; the step (jaxbert.finetune.kinds.embedding.step) takes it over the
whole global batch, in GradCache chunks of `mini_batch_size` rows when set. The model trained is the
family's bare encoder (`...Model`, no head); it is saved as a sentence-transformers directory
(jaxbert.finetune.kinds.embedding.export), and recognised by those files rather than by a head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from jaxbert.engine.recipe import RecipeError
from jaxbert.finetune.kinds.embedding.loss import POOLINGS
from jaxbert.finetune.features import Features, encode, sequence_arrays, special_id
from jaxbert.finetune.kinds.base import Kind
from jaxbert.finetune.row_files import (
    TaskDataError,
    local_path,
    read_rows,
    require_columns,
    text_cell,
)

# sentence-transformers' MultipleNegativesRankingLoss scale 20: the default most fine-tuned embedders
# were trained with; nomic's contrastive recipes use 0.02 (scale 50) on batches of thousands.
DEFAULT_TEMPERATURE = 0.05


@dataclass(frozen=True)
class EmbeddingOptions:
    """kinds.embedding: pooling (mean | cls | last); temperature (> 0; the initial value where learned);
    learn_temperature; symmetric (add the positive-to-anchor term, halve the sum); matryoshka_dims
    (prefix sizes the loss is also summed over; [] the whole embedding alone); prefixes (column name ->
    text put in front, e.g. {query: "search_query: "}); mini_batch_size (GradCache chunk rows; 0 none)."""

    pooling: str = "mean"
    temperature: float = DEFAULT_TEMPERATURE
    learn_temperature: bool = False
    symmetric: bool = False
    matryoshka_dims: list = field(default_factory=list)
    prefixes: dict = field(default_factory=dict)
    mini_batch_size: int = 0

    def check(self, prefix: str = "") -> None:
        if self.pooling not in POOLINGS:
            raise RecipeError(f"{prefix}pooling: {self.pooling!r} is not one of {', '.join(POOLINGS)}")
        if not self.temperature > 0:
            raise RecipeError(f"{prefix}temperature: {self.temperature} must be > 0")
        bad = next((d for d in self.matryoshka_dims if isinstance(d, bool) or not isinstance(d, int) or d < 1), None)
        if bad is not None:
            raise RecipeError(f"{prefix}matryoshka_dims: {bad!r} is not a positive whole number")
        bad = next((k for k, v in self.prefixes.items() if not isinstance(v, str)), None)
        if bad is not None:
            raise RecipeError(f"{prefix}prefixes.{bad}: {self.prefixes[bad]!r} is not text")
        if isinstance(self.mini_batch_size, bool) or self.mini_batch_size < 0:
            raise RecipeError(f"{prefix}mini_batch_size: {self.mini_batch_size} must be 0 (off) or a row count")


def check_run(options: EmbeddingOptions, hidden_size: int, global_batch: int, accum_steps: int, devices: int = 1,
              prefix: str = "kinds.embedding.") -> int:
    """Refuses what the options cannot do with this model and batch (RecipeError, one line); returns the
    GradCache chunk count (1: the batch embedded whole)."""
    high = [d for d in options.matryoshka_dims if d > hidden_size]
    if high:
        raise RecipeError(f"{prefix}matryoshka_dims: {high[0]} is above the model's hidden size {hidden_size}")
    if accum_steps != 1:
        raise RecipeError(f"train.accum_steps: {accum_steps}; the embedding kind takes every step's negatives from "
                          f"its whole batch, so it does not accumulate: set {prefix}mini_batch_size (GradCache) "
                          f"to bound memory instead")
    m = options.mini_batch_size
    if not m:
        return 1
    if global_batch % m or m % devices:
        raise RecipeError(f"{prefix}mini_batch_size: {m} does not divide the global batch {global_batch}"
                          + (f" into chunks spread over {devices} devices" if m % devices else ""))
    return global_batch // m


def negatives_line(options: EmbeddingOptions, global_batch: int, columns: int, chunks: int) -> str:
    """What a step's negatives are, for the run's log."""
    hard = columns - 2
    each = global_batch * (columns - 1) - 1
    how = f"embedded in {chunks} GradCache chunks of {global_batch // chunks}" if chunks > 1 else "embedded whole"
    return (f"embedding: each anchor scores {each + 1} candidates per step ({global_batch} positives"
            + (f" and {global_batch * hard} hard negatives" if hard else "")
            + f" of the global batch of {global_batch}; {each} negatives); batch {how}")


@dataclass(frozen=True)
class EmbeddingExample:
    """The texts of one row, in column order (anchor, positive, hard negatives; or one text to embed);
    score: an STS pair's gold score (an eval file of pairs with a score column), else None."""

    id: str
    texts: tuple[str, ...]
    columns: tuple[str, ...]
    score: float | None = None


def read_embedding(path, columns: Sequence[str] | None, labelled: bool = True):
    """Rows of a JSONL / CSV / TSV file: the named columns' texts, each present and not empty. For
    training (labelled) at least an anchor and a positive column."""
    columns = _check_columns(path, columns, labelled)
    rows, lines = read_rows(path)
    return _retrieval_examples(path, rows, lines, columns), None


def _check_columns(path, columns, labelled: bool) -> list:
    columns = list(columns or [])
    if labelled and len(columns) < 2:
        raise TaskDataError(f"{path}: the embedding kind reads --text-columns ANCHOR POSITIVE [NEGATIVE ...]; "
                            f"got {columns or 'none'}")
    if not columns:
        raise TaskDataError(f"{path}: name the column to embed with --text-columns")
    return columns


def _texts(path, row, n: int, columns) -> tuple:
    """A row's texts of COLUMNS, each present and not empty (TaskDataError naming the file, line and column)."""
    texts = tuple(text_cell(path, row, n, c) for c in columns)
    empty = next((c for c, t in zip(columns, texts) if not t.strip()), None)
    if empty is not None:
        raise TaskDataError(f"{path}: line {n} has an empty {empty}")
    return texts


def _retrieval_examples(path, rows, lines, columns) -> list:
    require_columns(path, rows, columns)
    name = local_path(path).name
    return [EmbeddingExample(f"{name}:{n}", _texts(path, row, n, columns), tuple(columns))
            for row, n in zip(rows, lines)]


def read_embedding_eval(path, columns: Sequence[str], score_column: str):
    """An eval file of a training run: STS pairs when its first row has `score_column` (the first two
    columns' texts and a number each row), else retrieval rows of every column (read_embedding).
    Returns (examples, is_sts)."""
    rows, lines = read_rows(path)
    if score_column not in rows[0]:
        return _retrieval_examples(path, rows, lines, _check_columns(path, columns, True)), False
    pair = list(columns)[:2]
    require_columns(path, rows, pair)
    name, out = local_path(path).name, []
    for row, n in zip(rows, lines):
        texts = _texts(path, row, n, pair)
        value = row.get(score_column)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise TaskDataError(f"{path}: line {n} has {score_column} {value!r}, not a number (an eval file whose "
                                f"first row has {score_column!r} is scored as STS pairs)")
        out.append(EmbeddingExample(f"{name}:{n}", texts, tuple(pair), float(value)))
    return out, True


def embedding_features(examples: Sequence[EmbeddingExample], tok, max_length: int, prefixes: dict) -> Features:
    """[N, C, L] arrays, each text encoded alone with its column's prefix; valid rows only."""
    if not examples:
        raise TaskDataError("no examples to encode")
    c = len(examples[0].texts)
    inputs = [prefixes.get(col, "") + text for e in examples for col, text in zip(e.columns, e.texts)]
    encodings, truncated = encode(tok, inputs, max_length)
    pad = special_id(tok, "pad")
    arrays, lengths, length = sequence_arrays(encodings, max_length, pad)
    n = len(examples)
    arrays = {k: v.reshape(n, c, length) for k, v in arrays.items()}
    arrays["token_type_ids"] = np.zeros_like(arrays["input_ids"])  # one segment per text
    return Features(arrays, lengths.reshape(n, c).max(axis=1), int(truncated.reshape(n, -1).any(1).sum()),
                    max_length, pad_values={"input_ids": pad})


class Embedding(Kind):
    name = "embedding"
    head = "Model"
    problem_type = None  # transformers allows none of its own here; the task record names the kind
    reads_columns = True
    recipe = "finetune-glue"
    metric_names = ()
    main_metric = "loss"
    Options = EmbeddingOptions

    def read_file(self, path, labels, labelled, table):
        return read_embedding(path, table.get("text_columns"), labelled)

    def make_features(self, examples, tok, max_length, options, labels):
        return embedding_features(examples, tok, max_length, options.prefixes), None

    def inputs(self, example, columns: dict) -> dict:
        return dict(zip(example.columns, example.texts))

    def prediction(self, i: int, example, decoded: dict, labels: Sequence[str] | None) -> dict:
        return {"embedding": [float(x) for x in decoded["embeddings"][i]]}

    def options_record(self, options: EmbeddingOptions) -> dict:
        return dataclasses.asdict(options)

    # `jaxbert finetune`'s loop for this kind, "module:function", imported by the command when it runs
    trainer = "jaxbert.finetune.kinds.embedding.run:train_embedding"
    reads_sources = True  # trains on --train FILE or on the recipe's data.sources (several files, weighted)

    def recognises(self, config) -> bool:
        """A bare encoder whose config's task record (config.json's jaxbert_task) names this kind; a
        directory is recognised by its sentence-transformers files (export.is_embedding_model)."""
        head = (config.architectures or [""])[0]
        record = config.extra.get("jaxbert_task") or {}
        return head.endswith(self.head) and record.get("kind") == self.name


KIND = Embedding()
