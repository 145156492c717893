"""Continued pretraining from a released checkpoint (domain adaptation): a directory as the hub ships
it (config.json, model.safetensors, tokenizer files; made here by transformers), a corpus, `jaxbert data
prepare --tokenizer DIR`, then `jaxbert train` with model.preset and model.init_from naming the directory.
For BERT, RoBERTa and ModernBERT: the first step's loss is the source model's own MLM loss on that batch
(transformers computes it), so the run starts from the released weights through the released tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.data.tokenizer import load_tokenizer, special_token_ids, train_tokenizer
from jaxbert.train import sources
from jaxbert.train.recipe import load as load_recipe
from tests.helpers.hf_models import tiny_hf_model, tiny_roberta_model
from tests.helpers.modernbert import tiny_hf
from tests.helpers.runs import train_losses, write_recipe

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = ["the return statement leaves the function", "a for loop iterates over a list",
             "the break statement ends the loop", "a dictionary maps keys to values",
             "the import statement loads a module", "a class defines methods and attributes"]


def _corpus(path):
    rng = np.random.default_rng(0)
    docs = [" . ".join(rng.choice(SENTENCES, 3)) + " ." for _ in range(120)]
    path.write_text("\n\n".join(docs) + "\n")
    return path


def _roberta_tokenizer(folder, corpus):
    from tokenizers import ByteLevelBPETokenizer, processors
    tok = ByteLevelBPETokenizer()
    tok.train([str(corpus)], vocab_size=300, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    transformers.RobertaTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<s>", eos_token="</s>",
                                      unk_token="<unk>", pad_token="<pad>", mask_token="<mask>").save_pretrained(folder)


def _released(family: str, folder, corpus):
    """A 'released' model directory: tokenizer files and a transformers model saved beside them."""
    if family == "roberta":
        _roberta_tokenizer(folder, corpus)
    else:
        train_tokenizer([str(corpus)], 300, folder, kind="bpe" if family == "modernbert" else "wordpiece")
    tok = load_tokenizer(folder)
    vocab, ids = tok.get_vocab_size(), special_token_ids(tok, folder)
    if family == "bert":
        model = tiny_hf_model("BertForMaskedLM", seed=3, vocab_size=vocab, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0, pad_token_id=ids["pad"])
    elif family == "roberta":
        model = tiny_roberta_model("RobertaForMaskedLM", seed=3, vocab_size=vocab, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0, pad_token_id=ids["pad"])
    else:
        model = tiny_hf("ModernBertForMaskedLM", seed=3, attn="sdpa", vocab_size=vocab, pad_token_id=ids["pad"],
                        cls_token_id=ids["cls"], sep_token_id=ids["sep"], bos_token_id=ids["cls"],
                        eos_token_id=ids["sep"])
    with torch.no_grad():  # a skewed output bias: the source's loss stands far from a fresh model's log(V)
        model.get_output_embeddings().bias.add_(2.0 * torch.randn(vocab, generator=torch.Generator().manual_seed(0)))
    model.save_pretrained(folder)
    return model, type(model).__name__


def _torch_mlm_loss(model, batch) -> float:
    """The mean cross-entropy over the batch's masked positions, as transformers' model computes the logits."""
    kwargs = {"input_ids": torch.tensor(batch["input_ids"], dtype=torch.long),
              "attention_mask": torch.tensor(batch["attention_mask"], dtype=torch.long)}
    if "token_type_ids" in model.forward.__code__.co_varnames:
        kwargs["token_type_ids"] = torch.tensor(batch["token_type_ids"], dtype=torch.long)
    with torch.no_grad():
        logits = model(**kwargs).logits.double().numpy()
    at = np.take_along_axis(logits, batch["masked_positions"][..., None].astype(np.int64), axis=1)  # [B, M, V]
    logp = at - np.log(np.exp(at - at.max(-1, keepdims=True)).sum(-1, keepdims=True)) - at.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, batch["masked_labels"][..., None].astype(np.int64), axis=-1)[..., 0]
    w = batch["masked_weights"]
    return float((nll * w).sum() / w.sum())


@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert"])
def test_a_released_checkpoint_continues_pretraining_on_a_new_corpus(tmp_path, family, capsys):
    corpus = _corpus(tmp_path / "domain.txt")
    released = tmp_path / "released"
    model, model_class = _released(family, released, corpus)
    assert main(["data", "prepare", "--input", str(corpus), "--tokenizer", str(released), "--output",
                 str(tmp_path / "data"), "--max-length", "32", "--validation-fraction", "0.1", "--quiet"]) == 0
    recipe = write_recipe(tmp_path / "adapt.yaml",
                          model={"preset": str(released), "config": {}, "model_class": model_class,
                                 "init_from": str(released)},
                          data={"source": "prepared", "dir": str(tmp_path / "data"), "seq_len": 32, "mask_rate": 0.3},
                          optim={"learning_rate": 1e-3, "warmup_steps": 0},
                          train={"steps": 2, "per_device_batch_size": 4, "log_every": 1, "eval_batches": 1})
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 0
    log = capsys.readouterr().out
    assert "init_from: loaded" in log and "finished at step 2" in log
    losses = train_losses(tmp_path / "run")
    assert len(losses) == 2 and np.isfinite(losses).all()
    # the first batch the run read, drawn again from the same recipe: the source model's loss on it
    first = next(iter(sources.make_source(load_recipe(recipe), str(tmp_path / "data"), 4)))
    expected = _torch_mlm_loss(model, first)
    assert losses[0] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    # a freshly initialised model of that config would start near log(V), far from the source's loss
    assert abs(expected - np.log(model.config.vocab_size)) > 0.5


def test_data_of_another_tokenizer_of_the_same_size_is_refused(tmp_path, capsys):
    """The released model's own tokenizer against the data's: same vocabulary size, two pieces swapped
    (a different tokenizer a size check cannot tell apart): one line, exit 2, no step taken."""
    import json
    corpus = _corpus(tmp_path / "domain.txt")
    released = tmp_path / "released"
    _, model_class = _released("bert", released, corpus)
    spec = json.loads((released / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = "statement", "loop"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    other = tmp_path / "other"
    other.mkdir()
    (other / "tokenizer.json").write_text(json.dumps(spec))
    assert load_tokenizer(other).get_vocab_size() == load_tokenizer(released).get_vocab_size()
    assert main(["data", "prepare", "--input", str(corpus), "--tokenizer", str(other), "--output",
                 str(tmp_path / "data"), "--max-length", "32", "--validation-fraction", "0.1", "--quiet"]) == 0
    recipe = write_recipe(tmp_path / "adapt.yaml",
                          model={"preset": str(released), "config": {}, "model_class": model_class,
                                 "init_from": str(released)},
                          data={"source": "prepared", "dir": str(tmp_path / "data"), "seq_len": 32},
                          train={"steps": 1, "per_device_batch_size": 4, "eval_batches": 1})
    capsys.readouterr()
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"model.init_from: {released} was trained with the tokenizer in {released}" in err[0]
    assert f"but {tmp_path / 'data'} was prepared with another" in err[0]
    assert f"prepare the data with --tokenizer {released}" in err[0]
    assert not list((tmp_path / "run").glob("checkpoints/*"))
    # (the released model's own tokenizer passes the check: the test above trains on such data)


def test_a_phase_started_from_an_unfinished_run_says_so(tmp_path, capsys, compile_cache):
    first = write_recipe(tmp_path / "p1.yaml", train={"steps": 40, "eval_batches": 1},
                         checkpoint={"every_steps": 100, "keep": 2})
    assert main(["train", "--config", str(first), "--workdir", str(tmp_path / "p1"), "--stop-after", "3"]) == 0
    second = write_recipe(tmp_path / "p2.yaml", model={"init_from": str(tmp_path / "p1")},
                          train={"steps": 1, "eval_batches": 1})
    capsys.readouterr()
    assert main(["train", "--config", str(second), "--workdir", str(tmp_path / "p2")]) == 0
    log = capsys.readouterr().out
    assert (f"init_from: {tmp_path / 'p1'} is at step 3 of the 40 its recipe plans: its run did not finish"
            in log), log
    assert "init_from: loaded" in log
    # a finished source is named as such
    assert main(["train", "--config", str(first), "--workdir", str(tmp_path / "p1"), "--set", "train.steps=4"]) == 0
    capsys.readouterr()
    assert main(["train", "--config", str(second), "--workdir", str(tmp_path / "p3")]) == 0
    log = capsys.readouterr().out
    assert f"init_from: {tmp_path / 'p1'} at step 4 (its run finished)" in log, log
