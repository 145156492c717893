"""Made data for the fine-tuning tests: a tiny WordPiece tokenizer and BERT saved as SRC, and
one data file per task kind with a pattern a small model learns in seconds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jax

from jaxbert import BertConfig
from jaxbert.bench.e2e import save_with_tokenizer
from jaxbert.data.tokenizer import load_tokenizer, train_tokenizer
from jaxbert.model.bert.heads import BertForMaskedLM

WORDS = ("the a cat dog sat ran on mat big small red blue house tree bird fish apple river stone cloud "
         "green yellow quick slow happy sad marker answer alpha beta gamma delta").split()


SPECIAL = ("alpha", "beta", "gamma", "delta")  # not among the filler words of _sentence


def make_source(root: Path, hidden: int = 32, layers: int = 2, dropout: float = 0.1) -> Path:
    """A BertForMaskedLM (random weights) with its tokenizer, saved as a Hugging Face directory."""
    rng = random.Random(0)
    text = root / "corpus.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)) + "\n")
    tok_dir = train_tokenizer([str(text)], 200, root / "tok", overwrite=True)
    vocab = load_tokenizer(tok_dir).get_vocab_size()
    cfg = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=2 * hidden, max_position_embeddings=128, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout)
    model = BertForMaskedLM(cfg)
    ids = jax.numpy.zeros((1, 8), jax.numpy.int32)
    params = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    return save_with_tokenizer(root / "src", model, params, tok_dir)


def _sentence(rng, n=6, avoid=()):
    pool = [w for w in WORDS[:24] if w not in avoid]
    return [rng.choice(pool) for _ in range(n)]


def classification_rows(n, seed):
    """label = which of 'apple' / 'river' the sentence holds."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        label = rng.choice(["fruit", "water"])
        words = _sentence(rng, avoid=("apple", "river"))
        words.insert(rng.randrange(len(words)), "apple" if label == "fruit" else "river")
        rows.append({"sentence": " ".join(words), "label": label})
    return rows


def regression_rows(n, seed):
    """target = how many times 'bird' appears."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        k = rng.randrange(4)
        words = _sentence(rng, avoid=("bird",))
        for _ in range(k):
            words.insert(rng.randrange(len(words) + 1), "bird")
        rows.append({"sentence": " ".join(words), "label": float(k)})
    return rows


def token_rows(n, seed):
    """B-X on the word 'marker', O elsewhere."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        words = _sentence(rng, 7, avoid=("marker",))
        at = rng.randrange(len(words) - 1)
        words[at] = "marker"
        tags = ["B-X" if j == at else "O" for j in range(len(words))]
        rows.append({"tokens": words, "tags": tags})
    return rows


def qa_doc(n, seed):
    """The answer is the word after 'marker', one of alpha / beta / gamma / delta (found nowhere else)."""
    rng, paragraphs = random.Random(seed), []
    for i in range(n):
        words = _sentence(rng, 10, avoid=("marker",))
        at = rng.randrange(len(words) - 1)
        words[at] = "marker"
        words[at + 1] = rng.choice(SPECIAL)
        context = " ".join(words)
        start = len(" ".join(words[:at + 1])) + 1
        answer = words[at + 1]
        paragraphs.append({"context": context, "qas": [{"id": f"q{seed}-{i}", "question": "what follows the marker",
                                                        "answers": [{"text": answer, "answer_start": start}]}]})
    return {"version": "1.1", "data": [{"title": "made", "paragraphs": paragraphs}]}


def choice_rows(n, seed):
    """The right ending repeats the context's word from alpha / beta / gamma / delta (the others hold none)."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        context = _sentence(rng, 4)
        context.insert(rng.randrange(5), rng.choice(SPECIAL))
        key = next(w for w in context if w in SPECIAL)
        label = rng.randrange(3)
        endings = []
        for j in range(3):
            words = _sentence(rng, 3)
            if j == label:
                words[rng.randrange(3)] = key
            endings.append(" ".join(words))
        rows.append({"context": " ".join(context), "endings": endings, "label": label})
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_kind(root: Path, kind: str, n_train: int = 256, n_eval: int = 64) -> tuple[Path, Path]:
    """(train file, eval file) of made data for a task kind."""
    root.mkdir(parents=True, exist_ok=True)
    if kind == "qa":
        paths = root / "train.json", root / "dev.json"
        paths[0].write_text(json.dumps(qa_doc(n_train, 1)))
        paths[1].write_text(json.dumps(qa_doc(n_eval, 2)))
        return paths
    make = {"classification": classification_rows, "regression": regression_rows, "tokens": token_rows,
            "choice": choice_rows}[kind]
    return write_jsonl(root / "train.jsonl", make(n_train, 1)), write_jsonl(root / "dev.jsonl", make(n_eval, 2))


# --- a GLUE_DIR of made data ----------------------------------------------------------------

_MNLI_TRAIN = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"]
_MNLI_DEV = _MNLI_TRAIN[:11] + ["label2", "label3", "label4", "label5", "gold_label"]
_STS = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2", "score"]


def _tsv(path: Path, header, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([("\t".join(header))] if header else []) + ["\t".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _pair(rng, label_index: int, n_labels: int):
    """Two made sentences; the second carries SPECIAL[label] so the label is learnable."""
    a, b = _sentence(rng, 5), _sentence(rng, 4)
    b.insert(rng.randrange(len(b) + 1), SPECIAL[label_index % len(SPECIAL)])
    return " ".join(a), " ".join(b)


def write_glue_dir(root: Path, n_train: int = 32, n_dev: int = 16, skip: tuple[str, ...] = ()) -> Path:
    """GLUE_DIR/<Folder>/train.tsv, dev.tsv (MNLI: dev_matched / dev_mismatched) for the eight tasks,
    with GLUE's file names, headers and columns (CoLA headerless); labels follow a planted word."""
    rng = random.Random(0)

    def rows(split_n, make):
        return [make(i) for i in range(split_n)]

    for split, n in (("train", n_train), ("dev", n_dev)):
        if "CoLA" not in skip:
            def cola(i):
                y = i % 2
                return ["gj04", y, "" if y else "*", _pair(rng, y, 2)[1]]
            _tsv(root / "CoLA" / f"{split}.tsv", None, rows(n, cola))
        if "SST-2" not in skip:
            def sst(i):
                return [_pair(rng, i % 2, 2)[1], i % 2]
            _tsv(root / "SST-2" / f"{split}.tsv", ["sentence", "label"], rows(n, sst))
        if "MRPC" not in skip:
            def mrpc(i):
                a, b = _pair(rng, i % 2, 2)
                return [i % 2, 1000 + i, 2000 + i, a, b]
            _tsv(root / "MRPC" / f"{split}.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                 rows(n, mrpc))
        if "QQP" not in skip:
            def qqp(i):
                a, b = _pair(rng, i % 2, 2)
                return [i, 2 * i, 2 * i + 1, a, b, i % 2]
            _tsv(root / "QQP" / f"{split}.tsv", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                 rows(n, qqp))
        if "STS-B" not in skip:
            def sts(i):
                a, b = _pair(rng, i % 4, 4)
                return [i, "main-captions", "MSRvid", "2012test", i, "none", "none", a, b, f"{(i % 4) * 1.5:.3f}"]
            _tsv(root / "STS-B" / f"{split}.tsv", _STS, rows(n, sts))
        if "MNLI" not in skip:
            names = ("contradiction", "entailment", "neutral")

            def mnli(i, dev):
                a, b = _pair(rng, i % 3, 3)
                y = names[i % 3]
                head = [i, i, f"{i}n", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)", a, b, y]
                return head + ([y] * 4 if dev else []) + [y]
            if split == "train":
                _tsv(root / "MNLI" / "train.tsv", _MNLI_TRAIN, rows(n, lambda i: mnli(i, False)))
            else:
                for name in ("dev_matched", "dev_mismatched"):
                    _tsv(root / "MNLI" / f"{name}.tsv", _MNLI_DEV, rows(n, lambda i: mnli(i, True)))
        for folder, first, second in (("QNLI", "question", "sentence"), ("RTE", "sentence1", "sentence2")):
            if folder in skip:
                continue
            def nli(i):
                a, b = _pair(rng, i % 2, 2)
                return [i, a, b, ("entailment", "not_entailment")[i % 2]]
            _tsv(root / folder / f"{split}.tsv", ["index", first, second, "label"], rows(n, nli))
    return root


def make_modernbert_source(root: Path, pooling: str = "cls", hidden: int = 32, layers: int = 2,
                           tokenizer_kind: str = "wordpiece") -> Path:
    """A ModernBertForMaskedLM (random weights, jaxbert's init) with the made WordPiece tokenizer (or with
    tokenizer_kind "bpe" a byte-level BPE, as ModernBERT's own), saved as a Hugging Face directory:
    model_type modernbert, its [CLS] / [SEP] / [PAD] ids in the config, a global then a local layer
    (window 16), classifier_pooling `pooling`, no token types in the tokenizer."""
    from jaxbert.model.classes import build_model
    from jaxbert.model.modernbert import ModernBertConfig
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    text = root / "corpus.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)) + "\n")
    tok_dir = train_tokenizer([str(text)], 200 if tokenizer_kind == "wordpiece" else 400, root / "tok",
                              overwrite=True, kind=tokenizer_kind)
    tok = load_tokenizer(tok_dir)
    ids = {t: tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
    cfg = ModernBertConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=2, global_attn_every_n_layers=2,
                           local_attention=16, max_position_embeddings=128, pad_token_id=ids["[PAD]"],
                           cls_token_id=ids["[CLS]"], bos_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"],
                           eos_token_id=ids["[SEP]"], classifier_pooling=pooling)
    model = build_model("ModernBertForMaskedLM", cfg)
    x = jax.numpy.zeros((1, 8), jax.numpy.int32)
    params = model.init(jax.random.PRNGKey(0), x, x)["params"]
    src = save_with_tokenizer(root / "src", model, params, tok_dir)
    tc = json.loads((src / "tokenizer_config.json").read_text())
    tc["model_input_names"] = ["input_ids", "attention_mask"]  # as ModernBERT's own tokenizer has it
    (src / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    return src
