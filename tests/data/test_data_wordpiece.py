"""The WordPiece vocabulary builder: merges worked out by hand, and the same vocabulary on every run."""

import os
import subprocess
import sys

from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.data.wordpiece import build_vocab

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_merges_by_count_then_older_pair():
    # ids: specials 0-4, alphabet sorted: ##a 5, ##b 6, a 7, b 8. Pairs: (a,##b) 2+3=5, (##b,##a) 3, (##a,##b) 3.
    # 1st merge (a,##b) -> "ab"; "abab" becomes [ab, ##a, ##b]: (ab,##a) 3 ties with (##a,##b) 3 and
    # the older pair (##a 5, ##b 6) wins -> "##ab"; then (ab, ##ab) 3 -> "abab".
    words = {"abab": 3, "ab": 2}
    assert build_vocab(words, 12, SPECIALS) == SPECIALS + ["##a", "##b", "a", "b", "ab", "##ab", "abab"]
    assert build_vocab(words, 10, SPECIALS) == SPECIALS + ["##a", "##b", "a", "b", "ab"]
    # a pair seen fewer than min_frequency times is never merged
    assert build_vocab({"xy": 1}, 50, SPECIALS, min_frequency=2) == SPECIALS + ["##y", "x", "y"]


_TRAIN = """
import sys, pydoc_data.topics
from pathlib import Path
from jaxbert.data.tokenizer import train_tokenizer
out = Path(sys.argv[1])
out.mkdir()
# a fifth of the language reference: the same code path as the embedded corpus, in a second
text = "\\n\\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)[::5])
(out / "corpus.txt").write_text(text)
train_tokenizer([str(out / "corpus.txt")], 1000, out / "tok")
"""


def test_two_fresh_trainings_give_the_same_vocabulary(tmp_path):
    # Separate interpreters with different hash seeds: what made the tokenizers trainer vary
    # (per-process random hash-map order) and what would make a Python set order vary.
    vocabs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", _TRAIN, str(tmp_path / seed)], check=True, env=env)
        vocabs.append((tmp_path / seed / "tok" / "vocab.txt").read_text(encoding="utf-8"))
    assert vocabs[0] == vocabs[1]
    tokens = vocabs[0].splitlines()
    assert len(tokens) == 1000 and tokens[:5] == SPECIALS and len(set(tokens)) == 1000
    tok = load_tokenizer(tmp_path / "1" / "tok")
    # frequent words of the language reference became single pieces
    assert [tok.id_to_token(i) for i in tok.encode("the statement", add_special_tokens=False).ids] == \
        ["the", "statement"]
