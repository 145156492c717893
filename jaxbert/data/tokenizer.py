"""Tokenizers for pretraining: load one from any common form, train a new one (BERT's WordPiece or
ModernBERT's byte-level BPE), hash it.

`load_tokenizer` returns a `tokenizers.Tokenizer` (the Rust tokenizer behind BertTokenizerFast)
with truncation and padding switched off, whatever the file said, because the data pipeline
packs raw ids itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from jaxbert import fs
from jaxbert.data.wordpiece import build_vocab, count_words
from jaxbert.errors import InputError
from jaxbert.fs import atomic_write_text, check_destination, publish_dir
from jaxbert.data.corpus import iter_documents

# Role -> default BERT spelling. Order is also the id order of a freshly trained vocabulary.
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask")
TOKENIZER_KIND = "tokenizer"  # what train_tokenizer publishes (fs.publish_dir)


@dataclasses.dataclass(frozen=True)
class TokenizerKind:
    """A kind of tokenizer train_tokenizer trains."""
    name: str  # as the logs say it
    model_type: str  # tokenizer.json's model.type
    word_pieces: bool  # marks a word's continuations (##), which whole-word masking needs


# BERT's WordPiece, ModernBERT's byte-level BPE
TOKENIZER_KINDS = {"wordpiece": TokenizerKind("WordPiece", "WordPiece", True),
                   "bpe": TokenizerKind("byte-level BPE", "BPE", False)}
DEFAULT_SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


class TokenizerError(InputError):
    """A tokenizer file is missing, unreadable or lacks a token the pipeline needs."""


def _bert_tokenizer(vocab: dict[str, int] | None, lowercase: bool, specials: dict[str, str]) -> Tokenizer:
    """A BERT WordPiece pipeline (BertNormalizer, BertPreTokenizer, [CLS] A [SEP] template)."""
    model = models.WordPiece(vocab, unk_token=specials["unk"], continuing_subword_prefix="##") if vocab \
        else models.WordPiece(unk_token=specials["unk"], continuing_subword_prefix="##")
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    if vocab:
        # matched whole before normalizing and splitting, as BertTokenizerFast does with them
        tok.add_special_tokens([AddedToken(t, special=True) for t in specials.values() if t in vocab])
        _add_template(tok, specials)
    return tok


def _add_template(tok: Tokenizer, specials: dict[str, str]) -> None:
    cls, sep = specials["cls"], specials["sep"]
    ids = {t: tok.token_to_id(t) for t in (cls, sep)}
    if None not in ids.values():
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=list(ids.items()))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise TokenizerError(f"cannot read {path}: {e}") from e


def special_token_names(path: str | os.PathLike | None) -> dict[str, str]:
    """Role -> token string, from special_tokens_map.json / tokenizer_config.json beside `path`."""
    names = dict(DEFAULT_SPECIAL_TOKENS)
    if path is None:
        return names
    path = fs.local_copy(path) if fs.is_url(path) else Path(path)
    folder = path if path.is_dir() else path.parent
    for fname in ("tokenizer_config.json", "special_tokens_map.json"):
        if (folder / fname).is_file():
            cfg = _read_json(folder / fname)
            for role in SPECIAL_ROLES:
                value = cfg.get(f"{role}_token")
                if isinstance(value, dict):  # AddedToken serialised as a dict
                    value = value.get("content")
                if isinstance(value, str):
                    names[role] = value
    return names


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Load a tokenizer.json, a WordPiece vocab.txt, a SentencePiece spm.model (a released DeBERTa-v3
    directory's) or a model directory holding one of them.

    For a vocab.txt, lower-casing follows `do_lower_case` of a neighbouring
    tokenizer_config.json (True, BERT's default, when there is none). An spm.model is read as
    transformers reads its directory (sentencepiece_tokenizer).
    """
    p = fs.local_copy(path) if fs.is_url(path) else Path(path)  # a URL: read from a local copy
    if p.is_dir():
        for name in ("tokenizer.json", "vocab.txt", "spm.model"):
            if (p / name).is_file():
                return load_tokenizer(p / name)
        raise TokenizerError(f"{p} holds neither tokenizer.json, vocab.txt nor spm.model")
    if not p.is_file():
        raise TokenizerError(f"tokenizer not found: {p}")
    if p.name == "spm.model":
        tok = sentencepiece_tokenizer(p.parent)
    elif p.suffix == ".json":
        try:
            tok = Tokenizer.from_file(str(p))
        except Exception as e:  # the Rust side raises plain Exception
            raise TokenizerError(f"{p} is not a tokenizers JSON file: {e}") from e
    else:
        vocab = {}
        try:
            with open(p, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    token = line.rstrip("\r\n")
                    inner = token.strip(" \t")
                    if " " in inner or "\t" in inner:  # prose, a table: words, not one token
                        raise TokenizerError(f"{p}: line {n} holds {token[:40]!r}, which is not one token; "
                                             f"is it a WordPiece vocab.txt (one token a line)?")
                    if token and token not in vocab:
                        vocab[token] = len(vocab)
        except UnicodeDecodeError:
            raise TokenizerError(f"{p} is not UTF-8 text; expected a WordPiece vocab.txt or tokenizer.json") from None
        if not vocab:
            raise TokenizerError(f"{p} is an empty vocabulary")
        specials = special_token_names(p)
        if not {specials["unk"], "[UNK]", "<unk>"} & set(vocab):  # WordPiece cannot encode an unknown word
            raise TokenizerError(f"{p} has no unknown token {specials['unk']!r}; is it a WordPiece vocab.txt?")
        lowercase = True
        if (p.parent / "tokenizer_config.json").is_file():
            lowercase = bool(_read_json(p.parent / "tokenizer_config.json").get("do_lower_case", True))
        tok = _bert_tokenizer(vocab, lowercase, specials)
    tok.no_truncation()
    tok.no_padding()
    return tok


def sentencepiece_tokenizer(folder: Path) -> Tokenizer:
    """The fast tokenizer transformers makes of a directory's SentencePiece spm.model (AutoTokenizer: the class its
    tokenizer_config.json or config.json names, DebertaV2TokenizerFast for a DeBERTa-v3 directory, converted from
    the slow one); it needs transformers and sentencepiece, each asked for by name where missing."""
    missing = [m for m in ("transformers", "sentencepiece") if importlib.util.find_spec(m) is None]
    if missing:  # transformers' conversion reads the model with sentencepiece
        raise TokenizerError(f"{folder / 'spm.model'}: reading a SentencePiece model needs {' and '.join(missing)} "
                             f"(pip install transformers sentencepiece)")
    import transformers

    try:
        fast = transformers.AutoTokenizer.from_pretrained(str(folder), use_fast=True)
    except Exception as e:  # transformers raises several kinds on a file it cannot read
        raise TokenizerError(f"{folder / 'spm.model'}: transformers could not read it as a tokenizer: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not getattr(fast, "is_fast", False):
        raise TokenizerError(f"{folder / 'spm.model'}: transformers made no fast tokenizer of it "
                             f"({type(fast).__name__})")
    return Tokenizer.from_str(fast.backend_tokenizer.to_str())


def special_token_ids(tok: Tokenizer, path: str | os.PathLike | None = None) -> dict[str, int]:
    """Role (pad/unk/cls/sep/mask) -> id; an error naming the token when one is missing."""
    ids = {}
    for role, token in special_token_names(path).items():
        i = tok.token_to_id(token)
        if i is None:
            where = f" ({path})" if path else ""
            raise TokenizerError(f"tokenizer{where} lacks the {role} token {token!r}, which BERT pretraining needs")
        ids[role] = int(i)
    return ids


def tokenizer_hash(tok: Tokenizer | str | os.PathLike) -> str:
    """sha256 of what decides the ids: vocabulary in id order, normalizer, pre-tokenizer, model type
    (and a BPE's merges).

    The same vocabulary loaded from vocab.txt or tokenizer.json hashes the same, so prepared
    data can be matched against a model's tokenizer in whatever form it ships.
    """
    if not isinstance(tok, Tokenizer):
        tok = load_tokenizer(tok)
    spec = json.loads(tok.to_str())
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    model = spec.get("model") or {}
    key = {"vocab": [t for t, _ in vocab], "normalizer": spec.get("normalizer"),
           "pre_tokenizer": spec.get("pre_tokenizer"), "model": model.get("type"),
           "prefix": model.get("continuing_subword_prefix")}
    if model.get("merges") is not None:  # a BPE's ids depend on its merges too (WordPiece has none)
        key["merges"] = model["merges"]
    return hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def save_bert_tokenizer(tok: Tokenizer, output_dir: str | os.PathLike, lowercase: bool,
                        model_max_length: int = 512) -> Path:
    """Write tokenizer.json, vocab.txt, tokenizer_config.json, special_tokens_map.json."""
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    if [i for _, i in vocab] != list(range(len(vocab))):
        raise TokenizerError("vocabulary ids are not contiguous; cannot write vocab.txt")
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "tokenize_chinese_chars": True,
              "strip_accents": None, "model_max_length": model_max_length,
              "clean_up_tokenization_spaces": True}
    return _save_tokenizer(tok, output_dir, config, {"vocab.txt": "".join(t + "\n" for t, _ in vocab)})


def _save_tokenizer(tok: Tokenizer, output_dir: str | os.PathLike, config: dict, extra: dict[str, str]) -> Path:
    """tokenizer.json, tokenizer_config.json (`config` + the special tokens), special_tokens_map.json and
    the `extra` {file name: text} into output_dir (a bucket URL: built locally, published when complete)."""
    if fs.is_url(output_dir):
        with fs.publish_dir(output_dir, "tokenizer", overwrite=True) as local:
            _save_tokenizer(tok, os.fspath(local), config, extra)
        return fs.as_path(output_dir)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    specials = {f"{r}_token": t for r, t in DEFAULT_SPECIAL_TOKENS.items()}
    atomic_write_text(out / "tokenizer.json", tok.to_str(pretty=True))
    for name, text in extra.items():
        atomic_write_text(out / name, text)
    atomic_write_text(out / "tokenizer_config.json", json.dumps({**config, **specials}, indent=2) + "\n")
    atomic_write_text(out / "special_tokens_map.json", json.dumps(specials, indent=2) + "\n")
    return out


def _byte_level_bpe() -> Tokenizer:
    """An untrained byte-level BPE pipeline as ModernBERT's (GPT-NeoX's): no normalizer, no lower-casing,
    ByteLevel pre-tokenizer and decoder, no unknown token (every byte is in the vocabulary)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    return tok


def _bpe_specials(specials: dict[str, str]) -> list[AddedToken]:
    """The special tokens in SPECIAL_ROLES order; [MASK] swallows the space before it (lstrip), as
    ModernBERT's does, so "the [MASK] statement" encodes as the, [MASK], Ġstatement."""
    return [AddedToken(specials[r], special=True, normalized=False, lstrip=r == "mask") for r in SPECIAL_ROLES]


def save_bpe_tokenizer(tok: Tokenizer, output_dir: str | os.PathLike, model_max_length: int = 8192) -> Path:
    """Write tokenizer.json, tokenizer_config.json, special_tokens_map.json of a byte-level BPE tokenizer
    that transformers' AutoTokenizer loads as PreTrainedTokenizerFast, giving no token_type_ids."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
              "model_input_names": ["input_ids", "attention_mask"],
              "clean_up_tokenization_spaces": False}  # byte-level decoding is exact; no space clean-up
    return _save_tokenizer(tok, output_dir, config, {})


def _train_bpe(inputs: list[str] | None, vocab_size: int, text_field: str, min_frequency: int) -> Tokenizer:
    """A byte-level BPE trained on `inputs`: the specials (ids 0-4 in SPECIAL_ROLES order), the 256 byte
    symbols, then the merges; template [CLS] $A [SEP] / [CLS] $A [SEP] $B [SEP], every type id 0."""
    specials = DEFAULT_SPECIAL_TOKENS
    tok = _byte_level_bpe()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  special_tokens=_bpe_specials(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    docs = [doc for doc, _ in iter_documents(inputs, text_field=text_field)]
    if not any(docs):
        where = "the embedded corpus" if inputs is None else ", ".join(map(str, inputs))
        raise TokenizerError(f"no vocabulary learnt from {where}: it holds no text")
    tok.train_from_iterator(docs, trainer, length=len(docs))
    tok.add_special_tokens(_bpe_specials(specials))  # the trainer adds them without lstrip
    cls, sep = specials["cls"], specials["sep"]
    template = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:0 {sep}:0",
        special_tokens=[(t, tok.token_to_id(t)) for t in (cls, sep)])
    # ByteLevel first trims each token's offsets of its leading space: "ĠLondon" spans "London",
    # so an answer or entity cut from the text by offsets (here and in transformers' pipelines)
    # carries no space.
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=True, add_prefix_space=False),
                                              template])
    return tok


# The largest vocabulary trained: the BPE trainer reserves memory in proportion to vocab_size (2**31
# asks for 140 GB and aborts the process), and token ids are int32 downstream.
MAX_VOCAB_SIZE = 2**24
_MAX_COUNT = 2**63 - 1  # the BPE trainer's min_frequency is an unsigned 64-bit count


def _check_train_arguments(kind: str, vocab_size: int, text_field: str, min_frequency: int) -> None:
    """Every argument of train_tokenizer, for both kinds, before anything is read or written."""
    if kind not in TOKENIZER_KINDS:
        raise TokenizerError(f"tokenizer kind {kind!r}: expected one of {', '.join(TOKENIZER_KINDS)}")
    smallest, why = ((len(SPECIAL_ROLES) + 1, "the special tokens alone take 5")
                     if TOKENIZER_KINDS[kind].word_pieces else
                     (len(SPECIAL_ROLES) + 256, "the special tokens and the 256 byte symbols alone take "
                                                f"{len(SPECIAL_ROLES) + 256}"))
    if not _is_int(vocab_size) or vocab_size < smallest:
        raise TokenizerError(f"vocab_size {vocab_size!r} is too small for a {TOKENIZER_KINDS[kind].name}: {why}")
    if vocab_size > MAX_VOCAB_SIZE:
        raise TokenizerError(f"vocab_size {vocab_size}: at most {MAX_VOCAB_SIZE:,} tokens")
    if not _is_int(min_frequency) or not 0 <= min_frequency <= _MAX_COUNT:
        raise TokenizerError(f"min_frequency {min_frequency!r}: must be a count >= 0 (a word or merge seen fewer "
                             f"times is left out)")
    if not isinstance(text_field, str) or not text_field:
        raise TokenizerError(f"text_field {text_field!r}: must name the jsonl/parquet field that holds the text")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def train_tokenizer(inputs: list[str] | None, vocab_size: int, output_dir: str | os.PathLike,
                    lowercase: bool = True, *, text_field: str = "text", min_frequency: int = 2,
                    overwrite: bool = False, kind: str = "wordpiece") -> Path:
    """Train a BERT WordPiece tokenizer on `inputs` (None: the embedded default corpus), or with
    kind="bpe" a byte-level BPE as ModernBERT's (cased whatever `lowercase` says; no token types).

    The vocabulary is the same for the same text on every run (jaxbert.data.wordpiece).
    Returns the output directory, which transformers' BertTokenizerFast loads as it is.
    It is built beside `output_dir` and swapped in when complete; an existing folder is
    replaced only when it is an earlier jaxbert tokenizer and `overwrite` is set.
    Both kinds give the specials the same ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4.
    """
    _check_train_arguments(kind, vocab_size, text_field, min_frequency)
    word_pieces = TOKENIZER_KINDS[kind].word_pieces  # WordPiece; otherwise the byte-level BPE
    check_destination(output_dir, TOKENIZER_KIND, overwrite, sources=tuple(inputs or ()))
    if word_pieces:
        tok = _train_wordpiece(inputs, vocab_size, lowercase, text_field, min_frequency)
    else:
        tok = _train_bpe(inputs, vocab_size, text_field, min_frequency)
    with publish_dir(output_dir, TOKENIZER_KIND, overwrite, sources=tuple(inputs or ())) as tmp:
        if word_pieces:
            save_bert_tokenizer(tok, tmp, lowercase)
        else:
            save_bpe_tokenizer(tok, tmp)
    return fs.as_path(output_dir)


def _train_wordpiece(inputs: list[str] | None, vocab_size: int, lowercase: bool, text_field: str,
                     min_frequency: int) -> Tokenizer:
    """BERT's WordPiece pipeline with a vocabulary counted from `inputs` (jaxbert.data.wordpiece)."""
    blank = _bert_tokenizer(None, lowercase, DEFAULT_SPECIAL_TOKENS)
    docs = (doc for doc, _ in iter_documents(inputs, text_field=text_field))
    counts = count_words(docs, blank.normalizer, blank.pre_tokenizer)
    tokens = build_vocab(counts, vocab_size, [DEFAULT_SPECIAL_TOKENS[r] for r in SPECIAL_ROLES],
                         min_frequency=min_frequency)
    if len(tokens) <= len(SPECIAL_ROLES):
        where = "the embedded corpus" if inputs is None else ", ".join(map(str, inputs))
        raise TokenizerError(f"no vocabulary learnt from {where}: it holds no text")
    return _bert_tokenizer({t: i for i, t in enumerate(tokens)}, lowercase, DEFAULT_SPECIAL_TOKENS)
