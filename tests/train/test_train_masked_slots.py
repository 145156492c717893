"""One M: what the ahead-of-time compile (and so the planner and the 'auto' batch) compiles is
exactly what the loader feeds, for every shipped recipe and for one that leaves max_predictions unset."""

from __future__ import annotations

import pytest

from jaxbert.data import prepare, tokenizer
from jaxbert.train import recipe as recipes
from jaxbert.train import sources
from jaxbert.plan.compile_step import abstract_batch

WORDS = ("the module imports a class that returns a value from the function the path names a file "
         "whose bytes are read while the list holds every item and the loop stops at the end").split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    lines = []
    for i in range(400):  # documents of several sentences, long enough to fill T=512 rows and NSP pairs
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(60 + i % 50)]
        lines.append(" ".join(words[:30]) + ". " + " ".join(words[30:]) + ".")
    (d / "docs.txt").write_text("\n\n".join(lines) + "\n")
    tok = tokenizer.train_tokenizer([str(d / "docs.txt")], 200, d / "tok")
    return d, tok


def _prepared(corpus, seq_len: int, nsp: bool, packing: str = "stream"):
    d, tok = corpus
    out = d / f"data-{seq_len}-{nsp}-{packing}"
    if not out.exists():
        # rows of 8192 (ModernBERT's phases 2 and 3) take half the corpus for two held-out rows
        prepare.prepare([str(d / "docs.txt")], str(tok), str(out), max_length=seq_len,
                        format="nsp" if nsp else "mlm", validation_fraction=0.1 if seq_len <= 1024 else 0.5,
                        progress=False,
                        packing=packing)
    return str(out)


CASES = [(name, []) for name in recipes.recipe_names()] + [
    ("tiny-demo", ["data.max_predictions=null", "data.mask_rate=0.2"]),
    ("tiny-demo", ["data.max_predictions=null", "data.whole_word_mask=true"]),
    ("tiny-demo", ["data.source=synthetic", "data.max_predictions=null"]),
]


@pytest.mark.parametrize("name,overrides", CASES, ids=[f"{n}{'+' if o else ''}{i}" for i, (n, o) in enumerate(CASES)])
def test_compiled_batch_is_the_fed_batch(corpus, name, overrides):
    r = recipes.load(name, overrides)
    data_dir = None if r.data.source == "synthetic" else _prepared(corpus, r.data.seq_len, r.data.nsp, r.data.packing)
    for split in ("train", "validation"):
        fed = next(iter(sources.make_source(r, data_dir, 2, split=split, fixed_masking=split != "train",
                                            vocab_size=200)))
        compiled = abstract_batch(r, 2, None, split=split)
        assert {k: (v.shape[1:], v.dtype) for k, v in compiled.items()} == \
            {k: (v.shape, v.dtype) for k, v in fed.items()}, (name, overrides, split)
