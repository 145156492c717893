"""Embedding models out and in: a sentence-transformers directory, written and read.

``write_sentence_transformers`` lays a trained encoder out as sentence-transformers saves one: the
transformers model (config.json, model.safetensors) and its tokenizer at the root, modules.json
naming Transformer (root) -> Pooling (1_Pooling/config.json) -> Normalize (2_Normalize),
sentence_bert_config.json (max_seq_length) and config_sentence_transformers.json (the column prefixes
as its prompts, cosine similarity), built beside DST and swapped in when complete.
``SentenceTransformer(DST).encode(texts)`` then gives the embeddings jaxbert gives.

``read_settings`` reads such a directory back (pooling, normalisation, prompts, max_seq_length): a
directory is an embedding model when it has modules.json and a Pooling module (``is_embedding_model``).
``encode`` embeds texts with a jaxbert module under those settings; ``predict_file`` writes one JSONL
row per input row with its ``embedding`` list.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert import fs
from jaxbert.convert.pretrained import MODEL_KIND, from_pretrained
from jaxbert.convert.writers import write_hf
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.errors import InputError
from jaxbert.finetune.kinds.embedding.loss import POOLINGS, normalise, pool
from jaxbert.finetune.kinds.embedding.metrics import pooled_corpus, retrieval, sts_spearman
from jaxbert.finetune.features import encode as encode_texts
from jaxbert.finetune.features import sequence_arrays, special_id
from jaxbert.finetune.kinds.embedding import read_embedding
from jaxbert.finetune.row_files import TaskDataError, cell, read_rows, require_columns

MODULES = "modules.json"
POOLING_DIR, NORMALIZE_DIR = "1_Pooling", "2_Normalize"
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
# pooling -> sentence-transformers' Pooling config key
_MODE_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "last": "pooling_mode_lasttoken"}
_OTHER_MODES = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class Settings:
    """How a sentence-transformers directory embeds: pooling, whether it normalises, prompts, max_seq_length."""

    pooling: str = "mean"
    normalize: bool = True
    prompts: dict = field(default_factory=dict)
    max_seq_length: int | None = None


def write_sentence_transformers(dst, config, class_name: str, params, tokenizer_dir, settings: Settings,
                                overwrite: bool = False) -> Path:
    """DST as a sentence-transformers directory (see the module docstring); an existing DST is replaced
    only when jaxbert wrote it and overwrite is set."""
    with fs.publish_dir(dst, MODEL_KIND, overwrite) as tmp:
        tmp = Path(tmp)
        write_hf(tmp, config, class_name, params)
        if tokenizer_dir is not None:
            tok = fs.local_copy(tokenizer_dir)
            for name in TOKENIZER_FILES:
                if (tok / name).exists():
                    shutil.copy2(tok / name, tmp / name)
        _write_json(tmp / MODULES, [
            {"idx": 0, "name": "0", "path": "", "type": _TRANSFORMER},
            {"idx": 1, "name": "1", "path": POOLING_DIR, "type": _POOLING},
        ] + ([{"idx": 2, "name": "2", "path": NORMALIZE_DIR, "type": _NORMALIZE}] if settings.normalize else []))
        (tmp / POOLING_DIR).mkdir()
        pooling = {"word_embedding_dimension": int(config.hidden_size)}
        pooling.update({key: mode == settings.pooling for mode, key in _MODE_KEYS.items()})
        pooling.update({key: False for key in _OTHER_MODES})
        pooling["include_prompt"] = True
        _write_json(tmp / POOLING_DIR / "config.json", pooling)
        if settings.normalize:
            (tmp / NORMALIZE_DIR).mkdir()
        length = settings.max_seq_length or int(config.max_position_embeddings)
        _write_json(tmp / "sentence_bert_config.json", {"max_seq_length": int(length), "do_lower_case": False})
        _write_json(tmp / "config_sentence_transformers.json", {
            "prompts": dict(settings.prompts), "default_prompt_name": None, "similarity_fn_name": "cosine"})
    return Path(dst)


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not readable JSON ({e})") from None


def is_embedding_model(path) -> bool:
    """Whether PATH is a sentence-transformers directory: modules.json naming a Pooling module."""
    p = Path(str(path)) / MODULES
    if not p.is_file():
        return False
    modules = _read_json(p)
    return isinstance(modules, list) and any(isinstance(m, dict) and m.get("type") == _POOLING for m in modules)


def read_settings(path) -> Settings:
    """The pooling, normalisation, prompts and max_seq_length of a sentence-transformers directory;
    InputError naming the file for one jaxbert cannot reproduce (another pooling, extra modules)."""
    folder = Path(str(path))
    if not is_embedding_model(folder):
        raise InputError(f"{folder}: no {MODULES} with a Pooling module; not a sentence-transformers model")
    modules = _read_json(folder / MODULES)
    types = [m.get("type") for m in modules]
    unknown = [t for t in types if t not in (_TRANSFORMER, _POOLING, _NORMALIZE)]
    if unknown or types[0] != _TRANSFORMER:
        raise InputError(f"{folder / MODULES}: modules {types}; jaxbert reads Transformer, Pooling and Normalize only")
    pool_dir = next(m["path"] for m in modules if m["type"] == _POOLING)
    cfg = _read_json(folder / pool_dir / "config.json")
    modes = [mode for mode, key in _MODE_KEYS.items() if cfg.get(key)]
    others = [key for key in _OTHER_MODES if cfg.get(key)]
    if len(modes) != 1 or others:
        raise InputError(f"{folder / pool_dir / 'config.json'}: pooling {modes + others}; jaxbert pools one of "
                         f"{', '.join(POOLINGS)}")
    st_cfg = folder / "config_sentence_transformers.json"
    prompts = (_read_json(st_cfg).get("prompts") or {}) if st_cfg.is_file() else {}
    bert_cfg = folder / "sentence_bert_config.json"
    length = _read_json(bert_cfg).get("max_seq_length") if bert_cfg.is_file() else None
    return Settings(modes[0], _NORMALIZE in types, dict(prompts), length)


def encode(module, params, tok, texts, settings: Settings, prompt: str = "", batch_size: int = 32,
           max_length: int | None = None) -> np.ndarray:
    """[N, D] float32 embeddings of texts (prompt put in front), as the directory's settings say."""
    limit = max_length or settings.max_seq_length or int(module.config.max_position_embeddings)

    @jax.jit
    def run(p, ids, mask):
        out = module.apply({"params": p}, ids, jnp.zeros_like(ids), mask, deterministic=True)
        emb = pool(out.last_hidden_state, mask, settings.pooling)
        return normalise(emb) if settings.normalize else emb

    pad, rows = special_id(tok, "pad"), []
    for start in range(0, len(texts), batch_size):
        encodings, _ = encode_texts(tok, [prompt + t for t in texts[start:start + batch_size]], limit)
        arrays, _, _ = sequence_arrays(encodings, limit, pad)
        rows.append(np.asarray(run(params, jnp.asarray(arrays["input_ids"]), jnp.asarray(arrays["attention_mask"]))))
    return np.concatenate(rows).astype(np.float32)


def embedding_rows(model_dir, input_path, columns=None, prompt_name: str | None = None, batch_size: int = 32) -> list:
    """`jaxbert predict` on an embedding model: one row per input row, its text and its `embedding` list.
    columns: the one column to embed (default: the first the model was trained on, else "text"); the
    prompt named, else the one named as the column, put in front."""
    settings = read_settings(model_dir)
    if columns is not None and len(columns) != 1:
        raise InputError(f"--text-columns {' '.join(columns)}: an embedding model embeds one column at a time")
    column = columns[0] if columns else _trained_columns(model_dir)[0]
    name = prompt_name if prompt_name is not None else (column if column in settings.prompts else None)
    if name is not None and name not in settings.prompts:
        raise InputError(f"--prompt {name}: {model_dir} has prompts {sorted(settings.prompts) or 'none'}")
    examples, _ = read_embedding(input_path, [column], labelled=False)
    module, params = from_pretrained(str(model_dir))
    emb = encode(module, params, load_tokenizer(str(model_dir)), [e.texts[0] for e in examples], settings,
                 settings.prompts.get(name, "") if name else "", batch_size)
    return [{"id": e.id, column: e.texts[0], "embedding": [float(x) for x in v]} for e, v in zip(examples, emb)]


def _trained_columns(model_dir) -> list:
    """The text columns a jaxbert-trained embedding model recorded (config.json's jaxbert_task), else ["text"]."""
    cfg = Path(str(model_dir)) / "config.json"
    record = (_read_json(cfg).get("jaxbert_task") or {}) if cfg.is_file() else {}
    return list(record.get("text_columns") or ["text"])


def predict_file(model_dir, input_path, out_path, column: str, prompt_name: str | None = None,
                 batch_size: int = 32) -> int:
    """embedding_rows of one column written to OUT as JSONL (built beside it, then renamed); returns rows written."""
    rows = embedding_rows(model_dir, input_path, [column], prompt_name, batch_size)
    out = Path(out_path)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    tmp.replace(out)
    return len(rows)


def evaluate_embedding(model_dir, eval_path, columns=None, label_column: str | None = None) -> dict:
    """`jaxbert evaluate` on an embedding model. Rows of ANCHOR POSITIVE [NEGATIVE ...] (default: the columns
    it was trained on): retrieval of each anchor in the pooled corpus of every positive and negative
    (recall@1/@10, MRR@10, nDCG@10); two text columns and --label-column SCORE: the Spearman correlation
    of their cosine with the score. Each column's prompt is put in front (the positive's for the corpus)."""
    settings = read_settings(model_dir)
    columns = list(columns) if columns else _trained_columns(model_dir)
    if len(columns) < 2 or (label_column and len(columns) != 2):
        raise InputError(f"--text-columns {' '.join(columns)}: an embedding model is evaluated on ANCHOR POSITIVE "
                         f"[NEGATIVE ...] rows, or on two texts with --label-column SCORE")
    examples, _ = read_embedding(eval_path, columns)
    module, params = from_pretrained(str(model_dir))
    tok = load_tokenizer(str(model_dir))

    def embed(texts, column):
        return encode(module, params, tok, texts, settings, settings.prompts.get(column, ""))
    if label_column:
        rows, lines = read_rows(eval_path)
        require_columns(eval_path, rows, [label_column])
        gold = []
        for row, n in zip(rows, lines):
            value = cell(eval_path, row, n, label_column)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TaskDataError(f"{eval_path}: line {n} has {label_column} {value!r}, not a number")
            gold.append(float(value))
        a = embed([e.texts[0] for e in examples], columns[0])
        b = embed([e.texts[1] for e in examples], columns[1])
        return {"spearman": sts_spearman(a, b, gold)}
    corpus, relevant = pooled_corpus([e.texts for e in examples])
    return retrieval(embed([e.texts[0] for e in examples], columns[0]), embed(corpus, columns[1]), relevant)
