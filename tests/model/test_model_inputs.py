"""Inputs longer than the position table, and tokenizers' stored padding: refused or handled, never NaN."""

import subprocess
import sys

import jax
import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

import jaxbert
from jaxbert import BertConfig, BertForMaskedLM, BertLMHeadModel, BertModel
from jaxbert.cli.main import main
from jaxbert.errors import InputError

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz")
CFG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=24, max_position_embeddings=12)


def _tokenizer(folder, pad_to=None):
    """A WordPiece tokenizer.json over WORDS; pad_to stores padding as MiniLM's does (to 128)."""
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(WORDS[:5])
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    if pad_to:
        tok.enable_padding(length=pad_to, pad_id=0, pad_token="[PAD]")
        tok.enable_truncation(max_length=pad_to)
    tok.save(str(folder / "tokenizer.json"))


def _model_dir(tmp_path, cls, pad_to=None, **cfg):
    config = CFG.replace(**cfg)
    module = cls(config)
    ids = np.ones((1, 4), np.int32)
    params = module.init(jax.random.key(0), ids, ids * 0)["params"]
    jaxbert.save_pretrained(tmp_path / "m", module, params)
    _tokenizer(tmp_path / "m", pad_to)
    return tmp_path / "m"


@pytest.mark.parametrize("cls,pos", [(BertForMaskedLM, "absolute"), (BertModel, "relative_key"),
                                     (BertLMHeadModel, "absolute")])
def test_model_refuses_sequences_longer_than_its_position_table(cls, pos):
    cfg = CFG.replace(position_embedding_type=pos, is_decoder=cls is BertLMHeadModel)
    module = cls(cfg)
    ok = np.ones((2, 12), np.int32)
    params = module.init(jax.random.key(0), ok, ok * 0)["params"]
    out = module.apply({"params": params}, ok, ok * 0)
    assert np.isfinite(np.asarray(out.logits if out.logits is not None else out.last_hidden_state)).all()
    long = np.ones((2, 13), np.int32)
    with pytest.raises(InputError, match="input length 13 exceeds the model's max_position_embeddings 12"):
        module.apply({"params": params}, long, long * 0)
    with pytest.raises(InputError, match="input length 13"):  # under jit too: shapes are static
        jax.jit(lambda p, x: module.apply({"params": p}, x, x * 0))(params, long)


def test_fill_mask_refuses_an_over_long_text(tmp_path, capsys):
    m = _model_dir(tmp_path, BertForMaskedLM)
    assert main(["fill-mask", str(m), "a [MASK] c", "--top-k", "2"]) == 0
    capsys.readouterr()
    text = "a " * 20 + "[MASK]"
    assert main(["fill-mask", str(m), text]) == 2
    err = capsys.readouterr().err
    assert "23 tokens exceed the model's max_position_embeddings 12" in err and "nan" not in err
    assert len(err.strip().splitlines()) == 1


def test_parity_truncates_with_a_warning_and_refuses_max_length_zero(tmp_path, capsys):
    m = _model_dir(tmp_path, BertForMaskedLM)
    assert main(["parity", str(m), "--text", "a b c d e f g h i j k l m n o p q r", "--max-length", "100000"]) == 0
    captured = capsys.readouterr()
    assert "--max-length 100000 exceeds the 12 positions of the model's table; texts are truncated to 12" in captured.err
    assert main(["parity", str(m), "--max-length", "0"]) == 2
    assert "--max-length 0: must be a positive number of tokens" in capsys.readouterr().err


def test_generate_ignores_stored_padding_and_refuses_over_long_prompts(tmp_path, capsys):
    m = _model_dir(tmp_path, BertLMHeadModel, pad_to=128, is_decoder=True)
    # With the stored padding the prompt would be 127 tokens, past the table of 12.
    assert main(["generate", str(m), "a b c", "--max-new-tokens", "4"]) == 0
    assert main(["generate", str(m), "a b c d e f g h", "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert "9 tokens + --max-new-tokens 4 exceed the model's max_position_embeddings 12" in err


def test_every_verb_loads_tokenizers_through_load_tokenizer(tmp_path):
    _tokenizer(tmp_path, pad_to=128)
    tok = jaxbert.data.tokenizer.load_tokenizer(tmp_path)
    assert tok.padding is None and tok.truncation is None and len(tok.encode("a b").ids) == 4
    out = subprocess.run(["grep", "-rln", "Tokenizer.from_file", jaxbert.__path__[0]], capture_output=True, text=True)
    assert out.stdout.split() == [f"{jaxbert.__path__[0]}/data/tokenizer.py"]
