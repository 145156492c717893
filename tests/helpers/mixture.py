"""Two corpora of distinct, recognisable documents for mixture tests: every word of `early` is a letter
a-m, every word of `late` a letter n-z, so each row tells which prepared folder it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxbert.data.prepare import prepare

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["."]
EARLY_IDS, LATE_IDS = np.arange(5, 18), np.arange(18, 31)  # ids of a..m, n..z
LETTERS = {"early": "abcdefghijklm", "late": "nopqrstuvwxyz"}


def corpus(path: Path, letters: str, n_docs: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(list(letters), int(rng.integers(5, 30)))) + " ." for _ in range(n_docs)]
    path.write_text("\n\n".join(docs) + "\n")


def prepare_sources(root: Path, docs: dict[str, int], max_length: int = 16, validation_fraction: float = 0.1,
                    vocab: list[str] = VOCAB, tokenizer: str = "tok") -> dict[str, int]:
    """Prepared folders root/NAME (NAME in `docs`: early or late, with that many documents) sharing the
    tokenizer root/TOKENIZER/vocab.txt; returns each one's training rows."""
    (root / tokenizer).mkdir(exist_ok=True)
    (root / tokenizer / "vocab.txt").write_text("\n".join(vocab) + "\n")
    sizes = {}
    for name, n_docs in docs.items():
        letters = LETTERS[name.split("-")[0]]
        corpus(root / f"{name}.txt", letters, n_docs, seed=sorted(LETTERS).index(name.split("-")[0]))
        meta = prepare([str(root / f"{name}.txt")], str(root / tokenizer / "vocab.txt"), str(root / name),
                       max_length=max_length, validation_fraction=validation_fraction, progress=False)
        sizes[name] = meta["splits"]["train"]["examples"]
    return sizes
