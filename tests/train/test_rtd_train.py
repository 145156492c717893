"""`jaxbert train` with train.objective: rtd: the recipe's refusals, a run with accumulation that stops and resumes
bit-exactly, and its export read back by transformers' ELECTRA classes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from jaxbert.cli.main import main
from jaxbert.train import recipe as recipe_lib
from jaxbert.train.recipe import RecipeError
from tests.helpers.runs import assert_recipe_refused, flat_params, untimed_rows

ELECTRA = {"preset": "electra", "model_class": "ElectraForPreTraining", "config": {
    "hidden_size": 32, "embedding_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 32,
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}}
RTD = {
    "name": "rtd-test", "model": ELECTRA,
    "data": {"source": "synthetic", "seq_len": 16, "mask_rate": 0.25},
    "optim": {"learning_rate": 3e-3, "warmup_steps": 2, "schedule": "linear"},
    "train": {"objective": "rtd", "steps": 8, "per_device_batch_size": 4, "accum_steps": 2, "log_every": 2,
              "eval_every": 0, "eval_batches": 2},
    "rtd": {"generator": {"width": "1/2", "depth": "1/2"}, "weight": 50, "sharing": "gdes"},
    "checkpoint": {"every_steps": 3, "keep": 5},
    "outputs": {"plot": False},
}


def _recipe(**patch) -> dict:
    data = copy.deepcopy(RTD)
    for section, values in patch.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    return data


@pytest.mark.parametrize("patch, key, words", [
    ({"rtd": {"weight": 0}}, "rtd.weight", "> 0"),
    ({"rtd": {"weight": -50}}, "rtd.weight", "> 0"),
    ({"rtd": {"generator": {"hidden_size": 64}}}, "rtd.generator", "larger than the discriminator's 32"),
    ({"rtd": {"generator": {"depth": "3/2"}}}, "rtd.generator.depth", "(0, 1]"),
    ({"rtd": {"sharing": "gdes"}, "model": {**ELECTRA, "config": {**ELECTRA["config"], "tie_word_embeddings": False}}},
     "rtd.sharing", "untied vocabularies"),
    ({"model": {"preset": "bert-tiny", "model_class": "BertForMaskedLM", "config": {}}}, "train.objective",
     "discriminator head"),
    ({"model": {**ELECTRA, "model_class": "ElectraForMaskedLM"}}, "model.model_class", "ElectraForPreTraining"),
    ({"train": {**RTD["train"], "objective": "mlm"}}, "model.model_class", "is a discriminator"),
    ({"train": {**RTD["train"], "objective": "electra"}}, "train.objective", "not one of"),
    ({"model": {**ELECTRA, "init_from": "runs/small", "init_tile": True}}, "model.init_tile", "for MLM runs"),
])
def test_rtd_recipe_refusals_name_the_key_and_write_nothing(tmp_path, capsys, patch, key, words):
    data = _recipe(**patch)
    assert_recipe_refused(data, key, words, tmp_path, capsys)


def test_generator_size_from_fractions_and_explicit_keys():
    from jaxbert.train.rtd_recipe import generator_config
    r = recipe_lib.from_dict(_recipe(rtd={"generator": {"width": 0.25, "num_hidden_layers": 1}}))
    gen = generator_config(r.rtd, r.model_config())
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size, gen.num_hidden_layers,
            gen.embedding_size) == (8, 1, 16, 1, 16)
    assert recipe_lib.from_dict(RTD).to_dict()["rtd"]["sharing"] == "gdes"
    assert "rtd" not in recipe_lib.from_dict(_recipe(model={"preset": "bert-tiny", "model_class": "BertForMaskedLM", "config": {}},
                                                     train={"objective": "mlm"})).to_dict()


@pytest.fixture(scope="module")
def rtd_run(tmp_path_factory):
    """(recipe path, workdir) of one 8-step GDES run that exported both models to WORKDIR/hf, shared by the
    tests of this module."""
    root = tmp_path_factory.mktemp("rtd-run")
    path = root / "rtd.yaml"
    path.write_text(yaml.safe_dump(_recipe(outputs={"plot": False, "export": True})))
    assert main(["train", "--config", str(path), "--workdir", str(root / "straight")]) == 0
    return path, root / "straight"


def test_rtd_run_resumes_bit_exactly_and_exports_both_models(rtd_run, tmp_path, capsys):
    path, straight = rtd_run
    stopped = tmp_path / "stopped"
    assert main(["train", "--config", str(path), "--workdir", str(stopped), "--stop-after", "5"]) == 0
    assert main(["train", "--config", str(path), "--workdir", str(stopped)]) == 0
    assert "resumed from" in capsys.readouterr().out
    a, b = flat_params(straight), flat_params(stopped)
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    # GDES: the discriminator's tables are E_delta, moved off their zero start by the RTD loss alone
    delta = next(k for k in a if k.startswith("discriminator/") and k.endswith("word_embeddings/embedding"))
    assert np.abs(a[delta]).max() > 0
    rows = untimed_rows(straight)
    assert untimed_rows(stopped) == rows
    last = [r for r in rows if "rtd_loss" in r][-1]
    assert last["step"] == 8 and 0 < last["replaced_fraction"] <= 1 and 0 <= last["rtd_auc"] <= 1
    assert last["loss"] == pytest.approx(last["mlm_loss"] + 50 * last["rtd_loss"])
    assert any("eval_rtd_accuracy" in r for r in rows)
    _check_export(straight / "hf", a)
    # `jaxbert export` of the workdir writes the same two models
    assert main(["export", str(straight), str(tmp_path / "out")]) == 0
    for sub in ("", "generator"):
        assert (tmp_path / "out" / sub / "model.safetensors").read_bytes() == \
            (straight / "hf" / sub / "model.safetensors").read_bytes()


def _check_export(hf, params):
    """The export, read by transformers: the discriminator's and the generator's logits on one input equal
    jaxbert's models on the joint params (float32)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import jax.numpy as jnp
    from flax import traverse_util
    from jaxbert.train import rtd_export
    r = recipe_lib.from_dict(RTD)
    joint = traverse_util.unflatten_dict({tuple(k.split("/")): jnp.asarray(v) for k, v in params.items()})
    (gen_model, gen), (disc_model, disc) = rtd_export.models_for_export(r, r.model_config(64), joint)
    ids = np.random.RandomState(0).randint(4, 64, (2, 12))
    d_t = transformers.ElectraForPreTraining.from_pretrained(hf).eval()
    g_t = transformers.ElectraForMaskedLM.from_pretrained(hf / "generator").eval()
    assert g_t.config.hidden_size == 16 and g_t.config.num_hidden_layers == 1 and d_t.config.hidden_size == 32
    with torch.no_grad():
        d_ref = d_t(torch.from_numpy(ids)).logits.numpy()
        g_ref = g_t(torch.from_numpy(ids)).logits.numpy()
    d_ours = np.asarray(disc_model.apply({"params": disc}, jnp.asarray(ids), jnp.zeros_like(ids)).logits)
    g_ours = np.asarray(gen_model.apply({"params": gen}, jnp.asarray(ids), jnp.zeros_like(ids)).logits)
    np.testing.assert_allclose(d_ours, d_ref, atol=1e-4 * np.abs(d_ref).max())
    np.testing.assert_allclose(g_ours, g_ref, atol=1e-4 * np.abs(g_ref).max())


def test_finetune_reads_an_rtd_workdir_as_its_exported_discriminator(rtd_run, capsys):
    """`jaxbert finetune --model WORKDIR` of an RTD run: the fine-tuning engine's encoder is the discriminator
    `jaxbert export` wrote (exactly), its GDES word table E_G + E_delta of the checkpoint, not E_delta alone."""
    from flax import traverse_util
    from jaxbert.finetune.model import load_task_model
    _, workdir = rtd_run
    capsys.readouterr()
    ours = load_task_model(workdir, "classification", ["a", "b"])
    assert "reading its discriminator" in capsys.readouterr().out
    exported = load_task_model(workdir / "hf", "classification", ["a", "b"])
    assert ours.class_name == exported.class_name == "ElectraForSequenceClassification"
    a, b = (traverse_util.flatten_dict(m.params) for m in (ours, exported))
    encoder = [k for k in a if k[0] == "electra"]
    assert len(encoder) > 20 and set(encoder) == {k for k in b if k[0] == "electra"}
    for k in encoder:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k
    raw = flat_params(workdir)
    name = "/".join(next(k for k in encoder if "word_embeddings" in k))
    e_g = next(v for k, v in raw.items() if k.startswith("generator/") and k.endswith("word_embeddings/embedding"))
    e_d = raw["discriminator/" + name]
    assert np.abs(e_d).max() > 0 and np.array_equal(np.asarray(a[tuple(name.split("/"))]), e_g + e_d)


def test_remat_auto_plans_the_rtd_step_and_init_from_continues_both_models(rtd_run, tmp_path, monkeypatch, capsys):
    """model.remat_policy: auto on an RTD recipe: the planner compiles the RTD step (both models, the RTD
    objective), picks the first policy that fits, and the run trains with it; the same run starts both models
    from an RTD export (model.init_from: the discriminator at DIR, the generator at DIR/generator)."""
    from jaxbert.plan import batch_search, compile_step
    monkeypatch.setattr(batch_search, "device_hbm_bytes", lambda device, devices=None: 2**30)  # CPU reports none
    planned = []
    original = compile_step.model_and_step

    def spy(recipe, cfg):
        model, step = original(recipe, cfg)
        planned.append((recipe.train.objective, type(model).__name__, step.__name__))
        return model, step
    monkeypatch.setattr(compile_step, "model_and_step", spy)
    _, source = rtd_run
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(_recipe(model={**ELECTRA, "remat_policy": "auto", "init_from": str(source / "hf")},
                                           train={**RTD["train"], "steps": 2, "accum_steps": 1})))
    wd = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", "--config", str(path), "--workdir", str(wd)]) == 0
    out = capsys.readouterr().out
    assert "plan: per_device_batch_size 4, remat_policy none" in out
    assert planned and planned[0][:2] == ("rtd", "RtdModel"), planned
    assert "init_from (discriminator):" in out and "init_from (generator):" in out
    assert out.count("init_from: loaded") == 2 and "freshly initialised" not in out
    effective = yaml.safe_load((wd / "recipe.yaml").read_text())
    assert effective["model"]["remat_policy"] == "none" and effective["train"]["objective"] == "rtd"
    assert [row["step"] for row in untimed_rows(wd) if "rtd_loss" in row] == [2]  # log_every 2


def _joint_start(recipe, init_from):
    """(the fresh joint params of recipe's pair, the joint params warm-started from init_from)."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn
    from jaxbert.train import rtd_warmstart
    from jaxbert.train.rtd_export import build_pair
    r = copy.deepcopy(recipe)
    r.model.init_from = str(init_from)
    cfg = r.model_config(64)
    dummy = jnp.zeros((1, 8), jnp.int32)
    fresh = jax.device_get(nn.meta.unbox(build_pair(r, cfg).init_boxed(jax.random.key(1), dummy, dummy)["params"]))
    lines = []
    return fresh, rtd_warmstart.warm_start(r, cfg, fresh, lines.append), lines


def _flat_models(joint, sharing="gdes"):
    from flax import traverse_util
    from jaxbert.model.rtd_tables import export_params
    gen, disc = export_params(joint, sharing)
    flat = lambda t: {"/".join(k): np.asarray(v) for k, v in traverse_util.flatten_dict(t).items()}  # noqa: E731
    return flat(gen), flat(disc)


def test_init_from_an_rtd_workdir_or_its_export_restores_both_models(rtd_run, tmp_path):
    """model.init_from under rtd (gdes): from the run's workdir and from its export, the two models the run
    ended with (tables within float32 rounding: E_delta is stored as E_D - E_G); from a discriminator alone,
    a fresh generator reading E_G = E_D and E_delta exactly zero."""
    import shutil
    from flax import traverse_util
    path, workdir = rtd_run
    recipe = recipe_lib.from_dict(yaml.safe_load(path.read_text()))
    ended = _flat_models(traverse_util.unflatten_dict(
        {tuple(k.split("/")): v for k, v in flat_params(workdir).items()}))
    for source in (workdir, workdir / "hf"):
        fresh, warm, lines = _joint_start(recipe, source)
        for got, want in zip(_flat_models(warm), ended):
            assert set(got) == set(want)
            for k in want:
                table = "embeddings" in k and k.rsplit("/", 2)[-2].endswith("_embeddings")
                np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-6 if table else 0, err_msg=k)
        assert not any("freshly initialised" in line for line in lines), lines
    # the discriminator alone: its weights, a fresh generator (its own init), E_G = E_D, E_delta = 0
    alone = tmp_path / "disc"
    shutil.copytree(workdir / "hf", alone, ignore=shutil.ignore_patterns("generator"))
    fresh, warm, lines = _joint_start(recipe, alone)
    gen, disc = _flat_models(warm)
    fresh_gen, _ = _flat_models(fresh)
    assert all(np.array_equal(disc[k], ended[1][k]) for k in disc)
    word = next(k for k in gen if k.endswith("word_embeddings/embedding"))
    assert np.array_equal(gen[word], disc[word])
    assert all(np.array_equal(gen[k], fresh_gen[k]) for k in gen if "embeddings" not in k)
    delta = [v for k, v in traverse_util.flatten_dict(warm["discriminator"]).items()
             if "embeddings" in k and k[-2].endswith("_embeddings")]
    assert len(delta) == 3 and all(not np.any(v) for v in delta)  # word, position, token type: E_delta = 0
    assert any("holds no generator" in line for line in lines)

