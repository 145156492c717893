"""The family contract: every registered family answers what callers used to re-derive (its MLM
class, its word embeddings, its layer layout), the public face lists every family's classes, a
config loads no jax, and every verb on a BERT, a RoBERTa and a ModernBERT directory (tiny, made by
transformers) works or refuses in one line."""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxbert
from jaxbert.cli.main import main
from jaxbert.model.families import FAMILIES, family_of_params
from jaxbert.model.classes import build_model, dummy_inputs
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten, scan_params, unscan_params
from tests.helpers.runs import REPO, write_recipe

MODERNBERT_SMALL = dict(model_type="modernbert", vocab_size=64, hidden_size=16, intermediate_size=24,
                        num_hidden_layers=3, num_attention_heads=2, global_attn_every_n_layers=2,
                        local_attention=4, max_position_embeddings=32, pad_token_id=0)
EUROBERT_SMALL = dict(model_type="eurobert", vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32, pad_token_id=0,
                      bos_token_id=2, eos_token_id=3, mask_token_id=4)


def test_a_config_loads_no_jax():
    """`python -X importtime -c "from jaxbert import BertConfig"` lists no jax or flax module, and
    building a BERT and a RoBERTa config after it imports none either (sys.modules says so too: the
    face imports lazily through importlib, which -X importtime does not list)."""
    code = ("import sys\nfrom jaxbert import BertConfig\n"
            "BertConfig(); BertConfig(model_type='roberta', pad_token_id=1)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    timed = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")]
    loaded = out.stdout.split()
    assert "jaxbert.model.families" in timed and "jaxbert.model.bert.config" in loaded  # the checks read real lists
    heavy = lambda names: [m for m in names if m.split(".")[0] in ("jax", "jaxlib", "flax", "optax", "orbax")]  # noqa: E731
    assert heavy(timed) == [] and heavy(loaded) == []
    assert heavy(["flax.linen", "jaxbert.model"]) == ["flax.linen"]


def test_the_face_and_model_types_come_from_the_registry():
    from jaxbert import ModernBertConfig, ModernBertForMaskedLM
    assert ModernBertForMaskedLM.__name__ == "ModernBertForMaskedLM" and ModernBertConfig().model_type == "modernbert"
    assert jaxbert.MODEL_TYPES == tuple(t for f in FAMILIES.values() for t in f.model_types)
    assert "modernbert" in jaxbert.MODEL_TYPES
    names = set(jaxbert.__all__)
    for family in FAMILIES.values():
        assert set(family.class_names()) <= names, family.name
        for model_type in family.model_types:
            assert getattr(jaxbert, family.mlm_class(model_type)).__name__ == family.mlm_class(model_type)
    with pytest.raises(AttributeError, match="no attribute 'NotAFamilyModel'"):
        jaxbert.NotAFamilyModel  # noqa: B018


def test_readme_family_table_is_the_registry_rendered():
    from jaxbert.model.families import markdown_table
    table = markdown_table()
    assert (REPO / "README.md").read_text().count(table) == 1
    assert all(f"`{f.mlm_class(f.model_types[0])}`" in table for f in FAMILIES.values())


def _config(family, model_type):
    if family.name == "modernbert":
        return family.config_class.from_dict(MODERNBERT_SMALL)
    if family.name == "eurobert":
        return family.config_class.from_dict(EUROBERT_SMALL)
    if family.name == "electra":  # its tables as wide as the layers (the projected case: tests/model/test_electra.py)
        return family.config_class(vocab_size=64, embedding_size=16, hidden_size=16, num_hidden_layers=3,
                                   num_attention_heads=2, intermediate_size=24, max_position_embeddings=40)
    return family.config_class(vocab_size=64, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                               intermediate_size=24, max_position_embeddings=40, model_type=model_type,
                               pad_token_id=1)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_finds_its_embeddings_and_scans_its_layers(name):
    family = FAMILIES[name]
    config = _config(family, family.model_types[0])
    mlm = family.mlm_class(config.model_type)
    per_layer = build_model(mlm, config).init(jax.random.key(0), *dummy_inputs(mlm, 1, 6))["params"]
    scanned = build_model(mlm, config, ModelOptions(scan_layers=True)).init(
        jax.random.key(0), *dummy_inputs(mlm, 1, 6))["params"]
    assert family_of_params(per_layer) is family
    assert family.word_embeddings(per_layer).shape == (64, 16)
    assert family.word_embeddings(per_layer[family.prefix]).shape == (64, 16)  # a bare encoder's tree
    stacks = (family.layer_stack,)
    split = unscan_params(scanned, stacks)
    # the scanned params, split, have every per-layer path and shape; stacked again, the scanned tree back
    assert {k: v.shape for k, v in flatten(split, "/").items()} == {k: v.shape for k, v in flatten(per_layer, "/").items()}
    again = flatten(scan_params(split, stacks), "/")
    assert again.keys() == flatten(scanned, "/").keys()
    assert all(np.array_equal(again[k], v) for k, v in flatten(scanned, "/").items())


def test_readers_flatten_a_scanned_modernbert_as_its_per_layer_keys():
    from jaxbert.convert import params_to_state_dict
    from jaxbert.convert.readers import TreeSource
    family = FAMILIES["modernbert"]
    config = family.config_class.from_dict(MODERNBERT_SMALL)
    scanned = build_model("ModernBertForMaskedLM", config, ModelOptions(scan_layers=True)).init(
        jax.random.key(0), *dummy_inputs("ModernBertForMaskedLM", 1, 6))["params"]
    ours = dict(TreeSource(scanned, "test").items())
    reference = params_to_state_dict(unscan_params(scanned, (family.layer_stack,)), config, "ModernBertForMaskedLM")
    assert "model.layers.2.attn.Wqkv.weight" in ours and "model.layers.0.mlp.Wo.weight" in ours
    for key, value in ours.items():
        if key in reference:
            np.testing.assert_array_equal(np.asarray(value), np.asarray(reference[key]), err_msg=key)


def test_trajectory_parity_gives_roberta_its_own_mlm_head():
    from jaxbert.parity.trajectory import mlm_model
    config = _config(FAMILIES["roberta"], "roberta")
    classifier = build_model("RobertaForSequenceClassification", config)
    params = classifier.init(jax.random.key(0), *dummy_inputs("RobertaForSequenceClassification", 1, 6))["params"]
    mlm, p = mlm_model(classifier, params)
    assert type(mlm).__name__ == "RobertaForMaskedLM"
    assert set(p) == {"roberta", "lm_head"}  # the classifier left out, a fresh lm_head
    np.testing.assert_array_equal(p["roberta"]["embeddings"]["word_embeddings"]["embedding"],
                                  params["roberta"]["embeddings"]["word_embeddings"]["embedding"])
    logits = mlm.apply({"params": p}, *dummy_inputs("RobertaForMaskedLM", 1, 6)).logits
    assert logits.shape == (1, 6, 64)


def test_a_modernbert_pretraining_workdir_is_read_by_every_verb(tmp_path, capsys):
    """2 steps of a tiny ModernBERT pretraining; then export, convert, parity and finetune --model read it."""
    recipe = write_recipe(tmp_path / "mb.yaml", model={
        "preset": "modernbert", "model_class": "ModernBertForMaskedLM",
        "config": {k: v for k, v in MODERNBERT_SMALL.items() if k != "model_type"}},
        optim={"name": "adamw", "learning_rate": 1e-3, "warmup_steps": 1},
        train={"steps": 2, "per_device_batch_size": 2, "log_every": 1, "eval_every": 0},
        checkpoint={"every_steps": 2, "keep": 1})
    run = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(run)]) == 0
    from jaxbert.workdir import read_run
    config, model_class, params, _ = read_run(run)
    assert model_class == "ModernBertForMaskedLM" and config.model_type == "modernbert"
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    assert type(hf).__name__ == "ModernBertForMaskedLM"
    np.testing.assert_allclose(hf.model.embeddings.tok_embeddings.weight.detach().numpy(),
                               np.asarray(params["model"]["embeddings"]["tok_embeddings"]["embedding"]), atol=0)
    assert main(["convert", str(run), str(tmp_path / "conv"), "--to", "jaxbert"]) == 0
    capsys.readouterr()
    assert main(["parity", str(run)]) == 0
    assert "PASS" in capsys.readouterr().out


# A CamemBERT: RoBERTa under another name, added from here as a user would (one Family entry, one
# register call); it is read, built, converted and listed in the face with no library file touched.
class CamembertForMaskedLM(jaxbert.BertForMaskedLM):
    """BertForMaskedLM for a camembert config."""


class CamembertModel(jaxbert.BertModel):
    """BertModel for a camembert config."""


def test_a_family_on_bert_modules_registered_from_outside_is_read_built_converted_and_listed(tmp_path):
    import dataclasses

    import torch
    import transformers

    from jaxbert.model import families
    roberta = FAMILIES["roberta"]
    camembert = dataclasses.replace(
        roberta, name="camembert", model_types=("camembert",), class_prefixes={"camembert": "Camembert"},
        heads=("Model", "ForMaskedLM"), builds_on="roberta", pretraining_classes=("CamembertForMaskedLM",),
        model_classes=lambda family: {c.__name__: c for c in (CamembertModel, CamembertForMaskedLM)})
    assert "camembert" not in jaxbert.MODEL_TYPES
    families.register(camembert)
    try:
        assert "camembert" in jaxbert.MODEL_TYPES and jaxbert.CamembertForMaskedLM is CamembertForMaskedLM
        assert "CamembertForMaskedLM" in jaxbert.__all__
        with pytest.raises(ValueError, match="already registered"):
            families.register(camembert)
        hf_config = transformers.CamembertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=24,
                                                 max_position_embeddings=40, pad_token_id=1, type_vocab_size=1)
        torch.manual_seed(0)
        hf = transformers.CamembertForMaskedLM(hf_config).eval()
        hf.save_pretrained(tmp_path / "cam")
        module, params = jaxbert.from_pretrained(tmp_path / "cam")
        assert type(module) is CamembertForMaskedLM and module.config.model_type == "camembert"
        ids = np.array([[0, 5, 9, 17, 2, 1, 1]])
        mask = (ids != 1).astype(np.int64)
        ours = np.asarray(module.apply({"params": params}, ids, np.zeros_like(ids), attention_mask=mask).logits)
        with torch.no_grad():
            theirs = hf(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
        np.testing.assert_allclose(ours[mask == 1], theirs[mask == 1], atol=2e-5)  # positions from pad + 1, lm_head
        jaxbert.save_pretrained(tmp_path / "back", module, params, format="hf")
        back = transformers.CamembertForMaskedLM.from_pretrained(tmp_path / "back").eval()
        with torch.no_grad():
            again = back(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
        np.testing.assert_allclose(again, theirs, atol=1e-6)
    finally:
        families.unregister("camembert")
    assert "camembert" not in jaxbert.MODEL_TYPES



def test_every_family_names_its_key_table_and_class_inference():
    """BERT's table and class inference are its entry's members, as ModernBERT's are its own."""
    from jaxbert.model.bert.config import BertConfig
    from jaxbert.model.bert.table import Table, infer_class
    assert FAMILIES["bert"].table is FAMILIES["roberta"].table  # one table for the classes on BERT's modules
    config = BertConfig(model_type="roberta", vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=24, max_position_embeddings=40, pad_token_id=1)
    table = FAMILIES["roberta"].table(config, "RobertaForMaskedLM")
    assert isinstance(table, Table) and table.by_key.keys() == Table(config, "RobertaForMaskedLM").by_key.keys()
    assert FAMILIES["roberta"].infer_class(config, list(table.by_key)) == infer_class(config, list(table.by_key))
    keys = table.by_key
    assert "lm_head.dense.weight" in keys and FAMILIES["roberta"].infer_class(config, list(keys)) == "RobertaForMaskedLM"
    gpt2 = BertConfig.from_dict({**config.to_dict(), "architectures": ["GPT2LMHeadModel"]})
    assert FAMILIES["roberta"].infer_class(gpt2, list(keys)) is None


def test_a_family_that_names_no_table_is_refused():
    """0.3.0: the contract's members are said by every family (0.2.0 took a missing table from the base family,
    with a warning)."""
    import dataclasses
    for name in ("roberta", "modernbert"):
        with pytest.raises(TypeError, match="'own' does not say its table, infer_class"):
            dataclasses.replace(FAMILIES[name], name="own", table=None, infer_class=None)


# ---- every verb on a BERT, a RoBERTa and a ModernBERT directory made by transformers ---------------------

_SENTENCES = ["the return statement leaves the function", "a for loop iterates over a list",
              "the break statement ends the loop", "a dictionary maps keys to values"]


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """{family: directory} of tiny transformers masked LMs, one per family, each with a WordPiece tokenizer."""
    import shutil

    import torch
    import transformers

    from jaxbert.data.tokenizer import load_tokenizer, train_tokenizer
    root = tmp_path_factory.mktemp("families")
    (root / "corpus.txt").write_text("\n".join(_SENTENCES * 20) + "\n")
    train_tokenizer([str(root / "corpus.txt")], 80, root / "tok")
    vocab = load_tokenizer(root / "tok").get_vocab_size()
    shape = dict(vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=48,
                 pad_token_id=0)
    made = {"bert": transformers.BertForMaskedLM(transformers.BertConfig(**shape, intermediate_size=24)),
            "roberta": transformers.RobertaForMaskedLM(transformers.RobertaConfig(**shape, intermediate_size=24,
                                                                                  type_vocab_size=1)),
            "modernbert": transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
                **shape, intermediate_size=24, global_attn_every_n_layers=2, local_attention=8,
                cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3)),
            "electra": transformers.ElectraForMaskedLM(transformers.ElectraConfig(**shape, intermediate_size=24,
                                                                                  embedding_size=8)),
            # v3-style: log buckets, shared keys, normed relative embeddings, no absolute positions
            "deberta-v2": transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
                **shape, intermediate_size=24, relative_attention=True, position_buckets=8, max_relative_positions=16,
                pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
                position_biased_input=False))}
    if hasattr(transformers, "EuroBertConfig"):  # transformers >= 5
        made["eurobert"] = transformers.EuroBertForMaskedLM(transformers.EuroBertConfig(
            **shape, intermediate_size=24, num_key_value_heads=1, bos_token_id=2, eos_token_id=3, mask_token_id=4))
    # a family added to the registry gets a directory here too (EuroBERT's where transformers has it)
    assert set(made) | {"eurobert"} == set(FAMILIES)
    out = {}
    for name, model in made.items():
        torch.manual_seed(0)
        model.eval().save_pretrained(root / name)
        for f in (root / "tok").iterdir():
            shutil.copy(f, root / name / f.name)
        out[name] = root / name
    return out


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_verb_on_each_family_works_or_refuses_in_one_line(name, hf_dirs, tmp_path, capsys):
    if name not in hf_dirs:
        pytest.skip(f"transformers {__import__('transformers').__version__} has no {name} (EuroBERT: transformers >= 5)")
    src = hf_dirs[name]
    family = FAMILIES[name]
    rc, out, err = _run(capsys, "fill-mask", src, "the [MASK] statement leaves the function .")
    assert rc == 0 and "[MASK] 1:" in out, err
    # (a forward parity per family: tests/parity/, tests/model/test_roberta.py)
    rc, out, err = _run(capsys, "parity", src, "--train-steps", "2", "--dtype", "float64")
    assert rc == 0 and "PASS" in out and family.mlm_class(family.model_types[0]) in out, err
    rc, out, err = _run(capsys, "convert", src, tmp_path / "j", "--to", "jaxbert")
    assert rc == 0, err
    # the rest refuse: each in one line naming what is missing, no traceback
    decoder = family.decoder_class(family.model_types[0])
    refusals = {("generate", src, "the return"): decoder or "LMHeadModel head",
                ("export", src, tmp_path / "x"): "checkpoint",
                ("plot", src): "training workdir",
                ("predict", src, tmp_path / "none.jsonl"): "name no fine-tuned task class"}
    for argv, named in refusals.items():
        rc, out, err = _run(capsys, *argv)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"jaxbert {argv[0]}: error:"), (argv, err)
        assert named in lines[0] and "Traceback" not in err + out, (argv, lines)
