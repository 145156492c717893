"""The byte-level BPE tokenizer (ModernBERT's kind): trained on a small text, loaded by jaxbert and by
transformers' AutoTokenizer alike, no token types, exact decoding, small fixed special ids; the
modernbert-tiny-demo recipe trains one and exports it."""

from __future__ import annotations

import json

import pytest

from jaxbert.cli.main import main
from jaxbert.data.tokenizer import TokenizerError, load_tokenizer, special_token_ids, tokenizer_hash, train_tokenizer
from jaxbert.train.recipe import RecipeError
from jaxbert.train.recipe import load as load_recipe
from tests.helpers.runs import REPO, write_recipe

TEXT = ("The return statement leaves the function. A for loop iterates over a list.\n"
        "Keyword arguments must follow positional arguments. naïve café, Zürich: 東京 ✓\n") * 40
SAMPLES = ["The return statement leaves the function.", "naïve café", "  two  spaces\tand a tab\n",
           "東京 ✓ 🙂", "unseen Wörds like Qxzjv"]
SPECIALS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    (root / "corpus.txt").write_text(TEXT, encoding="utf-8")
    return train_tokenizer([str(root / "corpus.txt")], 400, root / "tok", kind="bpe")


def test_the_bpe_folder_loads_in_jaxbert_with_small_fixed_special_ids(bpe_dir):
    tok = load_tokenizer(bpe_dir)
    spec = json.loads((bpe_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["model"]["type"] == "BPE" and spec["pre_tokenizer"]["type"] == "ByteLevel"
    assert spec["decoder"]["type"] == "ByteLevel" and spec["normalizer"] is None  # cased, untouched text
    assert special_token_ids(tok, bpe_dir) == SPECIALS
    assert tok.get_vocab_size() <= 400
    config = json.loads((bpe_dir / "tokenizer_config.json").read_text())
    assert config["model_input_names"] == ["input_ids", "attention_mask"]
    assert not (bpe_dir / "vocab.txt").exists()
    enc = tok.encode("a for loop", "the list")
    assert enc.ids[0] == 2 and enc.ids.count(3) == 2 and set(enc.type_ids) == {0}  # no token types
    # [MASK] takes the space before it, as ModernBERT's does
    assert tok.encode("the [MASK] statement", add_special_tokens=False).ids[1] == 4
    assert tok.encode("the [MASK] statement", add_special_tokens=False).tokens[2] == "Ġstatement"


def test_decoding_is_exact_and_nothing_is_unknown(bpe_dir):
    tok = load_tokenizer(bpe_dir)
    for text in SAMPLES:
        ids = tok.encode(text).ids
        assert SPECIALS["unk"] not in ids
        assert tok.decode(ids) == text


def test_transformers_autotokenizer_encodes_the_same_ids_without_token_types(bpe_dir):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(bpe_dir))
    assert type(hf).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")  # 4.x, 5.x: tokenizer.json's own
    tok = load_tokenizer(bpe_dir)
    for text in SAMPLES:
        out = hf(text)
        assert set(out) == {"input_ids", "attention_mask"}
        assert out["input_ids"] == tok.encode(text).ids
        assert hf.decode(out["input_ids"], skip_special_tokens=True) == text
    pair = hf("a for loop", "the list")
    assert "token_type_ids" not in pair and pair["input_ids"] == tok.encode("a for loop", "the list").ids
    assert (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id) == (0, 1, 2, 3, 4)


def test_the_same_text_trains_the_same_bpe_and_the_wordpiece_default_is_unchanged(bpe_dir, tmp_path):
    again = train_tokenizer([str(bpe_dir.parent / "corpus.txt")], 400, tmp_path / "again", kind="bpe")
    assert tokenizer_hash(again) == tokenizer_hash(bpe_dir)
    wp = train_tokenizer([str(bpe_dir.parent / "corpus.txt")], 120, tmp_path / "wp")
    assert json.loads((wp / "tokenizer.json").read_text())["model"]["type"] == "WordPiece"
    assert (wp / "vocab.txt").exists()
    with pytest.raises(TokenizerError, match="kind 'sentencepiece'"):
        train_tokenizer([str(bpe_dir.parent / "corpus.txt")], 400, tmp_path / "x", kind="sentencepiece")
    with pytest.raises(TokenizerError, match="256 byte symbols"):
        train_tokenizer([str(bpe_dir.parent / "corpus.txt")], 200, tmp_path / "y", kind="bpe")


def test_the_cli_trains_a_bpe_with_kind_bpe(bpe_dir, tmp_path, capsys):
    assert main(["tokenizer", "train", "--input", str(bpe_dir.parent / "corpus.txt"), "--vocab-size", "400",
                 "--output", str(tmp_path / "cli"), "--kind", "bpe"]) == 0
    assert "byte-level BPE vocabulary" in capsys.readouterr().out
    assert tokenizer_hash(tmp_path / "cli") == tokenizer_hash(bpe_dir)


def test_the_recipe_key_is_checked_by_name(tmp_path):
    assert load_recipe(write_recipe(tmp_path / "ok.yaml")).data.tokenizer_kind == "wordpiece"
    with pytest.raises(RecipeError, match="data.tokenizer_kind"):
        load_recipe(write_recipe(tmp_path / "bad.yaml", data={"source": "prepared", "tokenizer_kind": "unigram"}))
    with pytest.raises(RecipeError, match="data.whole_word_mask"):
        load_recipe(write_recipe(tmp_path / "wwm.yaml", data={"source": "prepared", "tokenizer_kind": "bpe",
                                                              "whole_word_mask": True}))
    demo = load_recipe(REPO / "configs" / "train" / "modernbert-tiny-demo.yaml")
    assert demo.data.tokenizer_kind == "bpe" and not demo.data.whole_word_mask
    c = demo.model.config
    assert (c["pad_token_id"], c["cls_token_id"], c["sep_token_id"], c["bos_token_id"], c["eos_token_id"]) == \
        (SPECIALS["pad"], SPECIALS["cls"], SPECIALS["sep"], SPECIALS["cls"], SPECIALS["sep"])


def test_a_short_modernbert_tiny_demo_run_trains_and_exports_the_bpe(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--config", str(REPO / "configs" / "train" / "modernbert-tiny-demo.yaml"),
                 "--workdir", str(run), "--set", "train.steps=20", "--set", "optim.warmup_steps=5",
                 "--set", "outputs.plot=false", "--set", "train.log_every=10"]) == 0
    out = capsys.readouterr().out
    assert "training byte-level BPE (vocab 4096)" in out and "finished at step 20" in out
    assert "ModernBertForMaskedLM 3x128, vocab 4096" in out
    assert "is not one token" not in out  # each answer is ranked: its space-led token (Ġimport)
    for folder in (run / "tokenizer", run / "hf"):
        spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        assert spec["model"]["type"] == "BPE"
    assert json.loads((run / "hf" / "tokenizer_config.json").read_text())["model_input_names"] == \
        ["input_ids", "attention_mask"]
    # `jaxbert export` reads a ModernBERT workdir (it once looked for BERT's word_embeddings and refused)
    assert main(["export", str(run), str(tmp_path / "exported")]) == 0
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["architectures"] == ["ModernBertForMaskedLM"]
    assert (tmp_path / "exported" / "model.safetensors").read_bytes() == (run / "hf" / "model.safetensors").read_bytes()
    capsys.readouterr()
    # the workdir's tokenizer is the kind the recipe asks for
    assert main(["train", "--config", str(REPO / "configs" / "train" / "modernbert-tiny-demo.yaml"),
                 "--workdir", str(run), "--set", "data.tokenizer_kind=wordpiece", "--set", "train.steps=20"]) != 0
    assert "data.tokenizer_kind: wordpiece, but" in capsys.readouterr().err


def test_the_hash_sees_the_merges(bpe_dir):
    """Two BPEs with one vocabulary and other merges encode differently: their hashes differ, so data
    prepared with one is not taken for the other's."""
    from tokenizers import Tokenizer
    tok = load_tokenizer(bpe_dir)
    spec = json.loads(tok.to_str())
    merges = spec["model"]["merges"]
    assert len(merges) > 2
    spec["model"]["merges"] = merges[:-1]  # the vocabulary stays as it is
    other = Tokenizer.from_str(json.dumps(spec))
    assert other.get_vocab(with_added_tokens=True) == tok.get_vocab(with_added_tokens=True)
    assert tokenizer_hash(other) != tokenizer_hash(tok)
    assert tokenizer_hash(Tokenizer.from_str(tok.to_str())) == tokenizer_hash(tok)


def test_fill_mask_shows_byte_level_tokens_as_text(bpe_dir):
    from jaxbert.infer.fill_mask import shown_token
    tok = load_tokenizer(bpe_dir)
    assert shown_token(tok, tok.token_to_id("Ġstatement")) == "statement"
    assert shown_token(tok, tok.token_to_id("Ċ")) == repr("\n")
    cafe = tok.encode(" café", add_special_tokens=False).ids
    assert "".join(tok.id_to_token(i) for i in cafe) != " café"  # byte-level spelling: not readable as is
    assert "".join(shown_token(tok, i) for i in cafe) == "café"


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
@pytest.mark.parametrize("flag,value,named", [
    ("--min-frequency", "-3", "min_frequency -3"),
    ("--min-frequency", str(2**64), f"min_frequency {2**64}"),
    ("--vocab-size", "-1", "vocab_size -1"),
    ("--vocab-size", str(2**40), f"vocab_size {2**40}"),
    ("--text-field", "", "text_field ''"),
])
def test_every_train_argument_is_checked_for_both_kinds(tmp_path, capsys, kind, flag, value, named):
    """A bad --min-frequency, --vocab-size or --text-field: one line naming it, exit 2, nothing
    written, for WordPiece and BPE alike (the BPE trainer once raised OverflowError on -3)."""
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    argv = {"--vocab-size": "400", "--min-frequency": "2", "--text-field": "text", flag: value}
    rc = main(["tokenizer", "train", "--kind", kind, "--input", str(tmp_path / "corpus.txt"),
               "--output", str(tmp_path / "tok"), *[x for kv in argv.items() for x in kv]])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and named in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]
