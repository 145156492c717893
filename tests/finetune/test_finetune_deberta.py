"""A DeBERTa-v3 directory as the hub holds one: a SentencePiece spm.model (trained here by the sentencepiece
package) beside a transformers DebertaV2ForMaskedLM, no tokenizer.json. jaxbert reads spm.model as transformers
does (its ids, specials included, equal transformers' tokenizer's), fill-mask gives transformers' distribution at
the mask, and fine-tuning on the directory learns its task and exports a model transformers loads."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

pytest.importorskip("sentencepiece", reason="reading spm.model needs sentencepiece (pip install sentencepiece)")
import sentencepiece
import torch
import transformers

from jaxbert.cli.main import main
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.finetune import loop as loop_lib
from jaxbert.finetune.predict import (
    _featurize,
    load_finetuned,
    read_examples,
    run_model,
)
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from jaxbert.infer.fill_mask import load_for_fill_mask, mask_probabilities
from tests.helpers.deberta import STYLES
from tests.helpers.finetune_data import WORDS, write_kind

QUIET = lambda m: None
TEXTS = ("the cat sat on the [MASK] .", "a big red house", "quick slow happy sad marker answer")


def make_v3_directory(root):
    """spm.model (unigram, [PAD] 0 [CLS] 1 [SEP] 2 [UNK] 3, [MASK] a user symbol), tokenizer_config.json naming
    DebertaV2Tokenizer, and a random v3-style DebertaV2ForMaskedLM saved by transformers."""
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(300)]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=80, model_type="unigram",
        pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]",
        unk_piece="[UNK]", user_defined_symbols=["[MASK]"], hard_vocab_limit=False, minloglevel=2)
    root.mkdir(parents=True, exist_ok=True)
    (root / "spm.model").write_bytes(model.getvalue())
    (root / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer",
                                                            "do_lower_case": False}))
    config = transformers.DebertaV2Config(**dict(STYLES["v3"], vocab_size=100, max_position_embeddings=128))
    torch.manual_seed(0)
    transformers.DebertaV2ForMaskedLM(config).eval().save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def v3_dir(tmp_path_factory):
    return make_v3_directory(tmp_path_factory.mktemp("deberta-v3-hub"))


def test_spm_model_reads_as_transformers_tokenizes(v3_dir):
    assert not (v3_dir / "tokenizer.json").exists()
    ours = load_tokenizer(v3_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(str(v3_dir))
    assert type(theirs).__name__.startswith("DebertaV2Tokenizer")
    for text in TEXTS:
        enc = ours.encode(text)
        assert enc.ids == theirs(text)["input_ids"], text
        assert enc.ids[0] == 1 and enc.ids[-1] == 2  # [CLS] ... [SEP]
    pair = ours.encode("the cat", "sat on the mat")
    want = theirs("the cat", "sat on the mat")
    assert pair.ids == want["input_ids"] and pair.type_ids == want["token_type_ids"]
    assert ours.token_to_id("[MASK]") == theirs.mask_token_id == 4


def test_fill_mask_gives_transformers_distribution(v3_dir, capsys):
    module, params, tok = load_for_fill_mask(v3_dir)
    ours = mask_probabilities(module, params, tok, TEXTS[0])
    theirs_tok = transformers.AutoTokenizer.from_pretrained(str(v3_dir))
    model = transformers.DebertaV2ForMaskedLM.from_pretrained(str(v3_dir)).eval()
    enc = theirs_tok(TEXTS[0], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0, enc["input_ids"][0] == theirs_tok.mask_token_id]
    np.testing.assert_allclose(ours, torch.softmax(logits, -1).numpy(), atol=1e-6)
    assert main(["fill-mask", str(v3_dir), TEXTS[0]]) == 0
    assert "[MASK] 1:" in capsys.readouterr().out


def test_fine_tuning_the_v3_directory_learns_and_exports(v3_dir, tmp_path):
    train, dev = write_kind(tmp_path / "data", "classification", n_train=192, n_eval=48)
    recipe = load("finetune-tiny", ["train.epochs=3"])
    summary = loop_lib.finetune(recipe, parse_task("classification", train, [dev]), v3_dir, tmp_path / "run",
                                log=QUIET)
    assert summary["status"] == "finished"
    assert summary["best"]["evals"]["dev"]["accuracy"] >= 0.85, summary["history"]
    best = tmp_path / "run" / "best"
    config = json.loads((best / "config.json").read_text())
    assert config["model_type"] == "deberta-v2" and config["architectures"] == ["DebertaV2ForSequenceClassification"]
    m = load_finetuned(best)
    features, _ = _featurize(m, read_examples(m, dev, labelled=False)[:12])
    ours = run_model(m, features)["logits"]
    model = transformers.DebertaV2ForSequenceClassification.from_pretrained(str(best)).eval()
    with torch.no_grad():
        theirs = model(**{k: torch.tensor(features.arrays[k], dtype=torch.long)
                          for k in ("input_ids", "attention_mask")}).logits.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
