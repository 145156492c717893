"""RoBERTa and XLM-RoBERTa: BERT's modules driven by config.model_type.

Random tiny transformers models go HF -> jaxbert -> HF bit for bit, and agree stage by stage
with transformers on left- and right-padded batches (RoBERTa's position ids depend on padding).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

import jaxbert
from jaxbert.convert import Table
from jaxbert.model.bert.config import MODEL_TYPES, BertConfig
from jaxbert.model.configs import ConfigError
from jaxbert.model.roberta.modules import roberta_positions
from jaxbert.parity.compare import compare
from jaxbert.parity.inputs import make_inputs
from tests.helpers.hf_models import tiny_roberta_model

CLASSES = ("RobertaForMaskedLM", "XLMRobertaForMaskedLM", "RobertaModel", "RobertaForSequenceClassification")


def test_position_ids_count_from_the_padding_index_and_follow_the_padding():
    ids = jnp.array([[0, 5, 6, 2, 1, 1],    # right padding (pad id 1)
                     [1, 1, 0, 5, 6, 2]])   # left padding
    expected = [[2, 3, 4, 5, 1, 1],
                [1, 1, 2, 3, 4, 5]]
    assert np.asarray(roberta_positions(ids, 1)).tolist() == expected
    try:
        from transformers.models.roberta.modeling_roberta import create_position_ids_from_input_ids
    except ImportError:  # transformers 5: a static method of RobertaEmbeddings
        from transformers.models.roberta.modeling_roberta import RobertaEmbeddings
        create_position_ids_from_input_ids = RobertaEmbeddings.create_position_ids_from_input_ids
    assert create_position_ids_from_input_ids(torch.tensor(np.asarray(ids)), 1).tolist() == expected


@pytest.mark.parametrize("name", CLASSES)
def test_round_trip_is_bit_exact_and_every_stage_matches_with_left_and_right_padding(name, tmp_path):
    hf = tiny_roberta_model(name, seed=CLASSES.index(name))
    hf.save_pretrained(tmp_path / "hf")
    module, params, report = jaxbert.from_pretrained(tmp_path / "hf", return_report=True)
    assert type(module).__name__ == name and module.config.model_type == hf.config.model_type
    assert not report.missing and not report.unused
    base = "roberta" if name != "RobertaModel" else None
    assert (base in params) if base else ("embeddings" in params and "pooler" in params)
    if name.endswith("ForMaskedLM"):
        assert set(params["lm_head"]) == {"dense", "layer_norm", "bias"}  # decoder tied to the embeddings

    jaxbert.save_pretrained(tmp_path / "back", module, params)
    a, b = load_file(tmp_path / "hf" / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == hf.config.model_type

    cfg = module.config
    for pad_left in (False, True):
        inputs = make_inputs(None, ["a b ||| c", "d e f g ||| h i", "j"], 32, cfg.vocab_size, seed=3,
                             pad_id=cfg.pad_token_id, type_vocab_size=cfg.type_vocab_size, pad_left=pad_left)
        assert (inputs["input_ids"] == 1).any() and not inputs["token_type_ids"].any()
        # transformers' own model (not one rebuilt from our params) is the reference.
        rep = compare(module, params, inputs, torch_reference=hf, jit=False)
        assert rep.ok, rep.table()  # every stage within 1e-5 (logits: 1e-5 x max(1, max |logit|))
        stages = [r.stage for r in rep.rows]
        assert stages[:3] == ["embeddings", "layer 1", "layer 2"] and len(stages) == 4, stages


def test_parity_cli_on_a_roberta_directory_pads_left(tmp_path, capsys):
    from jaxbert.cli.main import main
    tiny_roberta_model("RobertaForMaskedLM", seed=5).save_pretrained(tmp_path / "hf")
    assert main(["parity", str(tmp_path / "hf"), "--pad-left", "--json", str(tmp_path / "p.json")]) == 0
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["model_class"] == "RobertaForMaskedLM" and report["ok"]
    assert [r["stage"] for r in report["rows"]] == ["embeddings", "layer 1", "layer 2", "mlm logits"]


def _roberta_tokenizer(folder):
    """A byte-level BPE tokenizer with RoBERTa's special tokens, trained here on a few sentences."""
    from tokenizers import ByteLevelBPETokenizer, processors
    text = ["the break statement leaves the loop", "a list is a mutable sequence of items",
            "the return statement leaves the function", "a dictionary maps keys to values"] * 20
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(text, vocab_size=300, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    fast = transformers.RobertaTokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<s>", eos_token="</s>",
                                             unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    fast.save_pretrained(folder)
    return fast


def test_fill_mask_with_a_roberta_tokenizer_matches_transformers(tmp_path):
    from jaxbert.infer.fill_mask import fill_mask, load_for_fill_mask
    fast = _roberta_tokenizer(tmp_path / "m")
    hf = tiny_roberta_model("RobertaForMaskedLM", seed=9, vocab_size=len(fast))
    hf.save_pretrained(tmp_path / "m")
    module, params, tok = load_for_fill_mask(tmp_path / "m")
    text = "the break <mask> leaves the <mask>"
    preds = fill_mask(module, params, tok, text, top_k=4)
    enc = tok.encode(text)
    assert enc.ids[0] == 0 and enc.ids[-1] == 2 and enc.ids.count(4) == 2  # <s> ... </s>, two <mask>
    with torch.no_grad():
        logits = hf(torch.tensor([enc.ids])).logits[0]
    probs = torch.softmax(logits[torch.tensor(enc.ids) == 4], -1)
    assert len(preds) == 2
    for row, ours in zip(probs, preds):
        top = torch.topk(row, 4)
        # shown as transformers' tokenizer decodes each (no byte-level `Ġ`), white space quoted
        want = [fast.decode([int(i)]).strip() or repr(fast.decode([int(i)])) for i in top.indices]
        assert [t for t, _ in ours] == want and not any("Ġ" in t for t, _ in ours)
        np.testing.assert_allclose([p for _, p in ours], top.values.numpy(), atol=1e-6)


def test_other_model_types_and_missing_heads_are_refused_by_name(tmp_path):
    assert MODEL_TYPES == ("bert", "roberta", "xlm-roberta")
    for model_type in ("distilbert", "electra", "modernbert", "gpt2"):
        # a type no family has is not supported; another family's is read by its config class (ModernBertConfig)
        with pytest.raises(ConfigError, match=f"model_type '{model_type}' (is not supported|is read by \\w+Config, "
                                              "not BertConfig).*xlm-roberta"):
            BertConfig.from_dict({"model_type": model_type})
    cfg = BertConfig(model_type="roberta", pad_token_id=1, max_position_embeddings=40)
    with pytest.raises(ConfigError, match="model_type 'roberta' has no RobertaForPreTraining"):
        Table(cfg, "BertForPreTraining")
    with pytest.raises(ConfigError, match="RobertaForMaskedLM needs model_type 'roberta' or 'xlm-roberta'"):
        jaxbert.ALL_MODEL_CLASSES["RobertaForMaskedLM"](BertConfig()).init(
            jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))


def test_xlmr_base_250k_vocabulary_shards_under_fsdp_with_nothing_allocated():
    from jaxbert import XLMRobertaForMaskedLM
    from jaxbert.engine.parallel import param_specs
    from jaxbert.train.recipe import ParallelSection
    # xlm-roberta-base's config.json
    cfg = BertConfig.from_dict({"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 768,
                                "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                                "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
                                "layer_norm_eps": 1e-5})
    model = XLMRobertaForMaskedLM(cfg)
    ids = jnp.ones((1, 8), jnp.int32)
    boxed = jax.eval_shape(lambda: model.init_boxed(jax.random.PRNGKey(0), ids)["params"])
    word = boxed["roberta"]["embeddings"]["word_embeddings"]["embedding"]
    assert word.value.shape == (250002, 768) and isinstance(word.value, jax.ShapeDtypeStruct)
    specs = param_specs(boxed, ParallelSection(fsdp=True), 8)
    spec = specs["roberta"]["embeddings"]["word_embeddings"]["embedding"]
    assert tuple(spec) == (None, "data")  # 768 / 8 per device: 250002 x 96 floats, 96 MB instead of 768 MB
    vocab_first = param_specs(boxed, ParallelSection(fsdp=True, fsdp_axes=["vocab", "embed"]), 2)
    assert tuple(vocab_first["roberta"]["embeddings"]["word_embeddings"]["embedding"]) == ("data", None)
    assert tuple(vocab_first["lm_head"]["bias"]) == ("data",)
    off = param_specs(boxed, ParallelSection(fsdp=False), 8)
    assert all(axis is None for axis in off["roberta"]["embeddings"]["word_embeddings"]["embedding"])


def test_roberta_recipe_trains_and_exports_what_transformers_loads(tmp_path, capsys):
    from jaxbert.cli.main import main
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join("The break statement terminates the nearest enclosing loop. "
                                "A list is a mutable sequence of items, such as strings. " * 3 for _ in range(40)))
    train_tokenizer([str(text)], 200, tmp_path / "tok")
    prepare([str(text)], str(tmp_path / "tok"), str(tmp_path / "data"), max_length=32, validation_fraction=0.1,
            progress=False)
    # The shipped recipe, shrunk to a 1-layer model and 3 steps on this small corpus.
    small = ["data.dir=" + str(tmp_path / "data"), "data.seq_len=32", "model.config.hidden_size=32",
             "model.config.num_hidden_layers=1", "model.config.num_attention_heads=2",
             "model.config.intermediate_size=64", "model.config.max_position_embeddings=34",
             "train.steps=3", "train.eval_every=0", "train.eval_batches=1", "train.per_device_batch_size=4",
             "checkpoint.every_steps=3", "outputs.plot=false"]
    wd = tmp_path / "run"
    argv = ["train", "--config", "roberta-tiny-demo", "--workdir", str(wd)]
    assert main(argv + [a for s in small for a in ("--set", s)]) == 0
    out = capsys.readouterr().out
    assert "RobertaForMaskedLM 1x32" in out and "finished at step 3" in out and "[MASK] 1:" in out
    model, info = transformers.RobertaForMaskedLM.from_pretrained(wd / "hf", output_loading_info=True)
    assert list(info["missing_keys"]) == [] and list(info["unexpected_keys"]) == []  # sets in transformers 5
    assert model.config.model_type == "roberta" and model.config.pad_token_id == 0
    module, params = jaxbert.from_pretrained(wd / "hf")
    ids = np.array([[2, 7, 9, 11, 4, 13, 3, 0, 0]])  # right padding with [PAD] = 0
    mask = (ids != 0).astype(np.int64)
    ours = np.asarray(module.apply({"params": params}, ids, attention_mask=mask).logits)
    with torch.no_grad():
        theirs = model.eval()(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(ours[0, :7], theirs[0, :7], atol=1e-5)


def test_roberta_recipe_refuses_a_pad_id_the_tokenizer_does_not_have(tmp_path):
    from jaxbert.train.loop import train_and_evaluate
    from jaxbert.train.recipe import RecipeError, load
    from jaxbert.data.tokenizer import train_tokenizer
    from jaxbert.data.prepare import prepare
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join("A list is a mutable sequence of items. " * 4 for _ in range(30)))
    train_tokenizer([str(text)], 120, tmp_path / "tok")
    prepare([str(text)], str(tmp_path / "tok"), str(tmp_path / "data"), max_length=16, validation_fraction=0.1,
            progress=False)
    recipe = load("roberta-tiny-demo", ["data.dir=" + str(tmp_path / "data"), "data.seq_len=16",
                                        "model.config.pad_token_id=1"])
    with pytest.raises(RecipeError, match="pad_token_id: 1, but the tokenizer's pad token is 0"):
        train_and_evaluate(recipe, tmp_path / "run")
