"""Optimizers as registered sections: each with its own keys and defaults, an unknown key for the
chosen one refused by name, and one added from this file by a single registration that trains."""

from __future__ import annotations

import dataclasses
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
import yaml

from jaxbert.cli.main import main
from jaxbert.engine.optim import OPTIMIZERS, OptimSection, make_optimizer
from jaxbert.engine.recipe import RecipeError
from jaxbert.finetune import recipe as F
from jaxbert.train import recipe as R
from tests.helpers.runs import TINY, final_params, train_losses, write_recipe

PARAMS = {"dense": {"kernel": jnp.full((3, 4), 0.5), "bias": jnp.zeros(4)}}
GRADS = {"dense": {"kernel": jnp.array([[0.1, -0.2, 0.3, -0.4]] * 3), "bias": jnp.array([0.5, -0.5, 0.0, 1.0])}}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_registered_optimizer_is_its_own_section_and_takes_a_step(name):
    section = OptimSection(name=name, learning_rate=0.1, clip_norm=None, schedule="constant")
    assert type(section) is OPTIMIZERS[name] and section.name == name and OPTIMIZERS[name]().name == name
    tx, _ = make_optimizer(section, 10)
    updates, _ = tx.update(GRADS, tx.init(PARAMS), PARAMS)
    # every optimizer steps against the gradient's sign on this first step, biases undecayed
    assert np.all(np.sign(updates["dense"]["bias"]) == -np.sign(GRADS["dense"]["bias"]))
    # a recipe naming it gets a section of that class, its keys those of the class
    recipe = R.from_dict({**TINY, "optim": {"name": name}})
    assert type(recipe.optim) is OPTIMIZERS[name]
    assert set(recipe.to_dict()["optim"]) == {f.name for f in dataclasses.fields(OPTIMIZERS[name])}


def test_each_optimizer_has_its_own_defaults():
    adamw, lion, stable = (R.from_dict({**TINY, "optim": {"name": n}}).optim for n in ("adamw", "lion", "stable_adamw"))
    assert (adamw.b2, lion.b2, stable.b2) == (0.999, 0.99, 0.98)
    assert (adamw.weight_decay, lion.weight_decay, stable.decoupled_weight_decay) == (0.01, 1e-3, 1e-5)
    # fine-tuning's defaults (peak, warmup share) go over whichever optimizer the recipe names
    ft = F.from_dict({"optim": {"name": "lion"}}).optim
    assert (type(ft).__name__, ft.learning_rate, ft.warmup_ratio, ft.b2) == ("LionSection", 2e-5, 0.1, 0.99)
    assert F.FinetuneRecipe().optim.learning_rate == 2e-5


def test_lion_steps_by_the_sign_and_its_decay_is_scaled_by_the_learning_rate():
    o = OptimSection(name="lion", learning_rate=0.1, weight_decay=0.5, clip_norm=None, schedule="constant")
    tx, _ = make_optimizer(o, 10)
    u, _ = tx.update(GRADS, tx.init(PARAMS), PARAMS)
    # first step: sign((1 - b1) g) = sign(g); decay 0.5 * p on kernels only, the whole times -lr
    np.testing.assert_allclose(u["dense"]["kernel"], -0.1 * (np.sign(GRADS["dense"]["kernel"]) + 0.5 * 0.5), rtol=1e-6)
    np.testing.assert_allclose(u["dense"]["bias"], -0.1 * np.sign(GRADS["dense"]["bias"]), rtol=1e-6)


def test_a_key_the_chosen_optimizer_does_not_have_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(RecipeError, match=r"optim\.eps: unknown key for optimizer lion; expected one of \["):
        R.load("tiny-demo", ["optim.name=lion", "optim.eps=1e-8"])
    with pytest.raises(RecipeError, match=r"optim\.b1: must be in \[0, 1\), got 2"):
        R.load("tiny-demo", ["optim.name=stable_adamw", "optim.b1=2"])
    workdir = tmp_path / "run"
    assert main(["train", "--workdir", str(workdir), "--set", "optim.name=lion", "--set", "optim.eps=1e-8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optim.eps: unknown key for optimizer lion" in err[0]
    assert not workdir.exists()


def test_stable_adamw_takes_its_old_weight_decay_key_with_a_warning_and_the_same_meaning(tmp_path):
    path = write_recipe(tmp_path / "r.yaml", optim={"name": "stable_adamw", "weight_decay": 3e-5})
    with pytest.warns(DeprecationWarning, match="optim.weight_decay of optimizer stable_adamw is now "
                                                "optim.decoupled_weight_decay"):
        old = R.load(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new key warns of nothing
        new = R.load(str(write_recipe(tmp_path / "n.yaml", optim={"name": "stable_adamw",
                                                                  "decoupled_weight_decay": 3e-5})))
    assert old.optim == new.optim and old.optim.decoupled_weight_decay == 3e-5
    with pytest.raises(RecipeError, match="optim.weight_decay: the old name of optim.decoupled_weight_decay"):
        R.load(str(path), ["optim.decoupled_weight_decay=1e-5"])
    with pytest.warns(DeprecationWarning):
        assert OptimSection(name="stable_adamw", weight_decay=2e-5).decoupled_weight_decay == 2e-5


# ---- an optimizer added from outside the library: one section class, one registration ----------
@dataclasses.dataclass
class AdafactorSection(OptimSection):
    """Adafactor (Shazeer & Stern 2018), factored second moments: keys of its own, none of Adam's."""
    name: str = "adafactor"
    decay_rate: float = 0.8
    min_dim_size_to_factor: int = 8  # factor the tiny model's 32 x 64 kernels

    def transform(self, schedule):
        return optax.adafactor(schedule, decay_rate=self.decay_rate, min_dim_size_to_factor=self.min_dim_size_to_factor,
                               multiply_by_parameter_scale=False)


def test_an_optimizer_registered_from_a_test_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(OPTIMIZERS, "adafactor", AdafactorSection)  # the one registration
    optim = {"name": "adafactor", "learning_rate": 1e-2, "warmup_steps": 0, "schedule": "constant", "decay_rate": 0.7}
    path = write_recipe(tmp_path / "r.yaml", optim=optim, train={"steps": 4, "log_every": 1})
    with pytest.raises(RecipeError, match="optim.b2: unknown key for optimizer adafactor"):
        R.load(str(path), ["optim.b2=0.9"])
    workdir = tmp_path / "run"
    assert main(["train", "--config", str(path), "--workdir", str(workdir)]) == 0
    assert "finished at step 4" in capsys.readouterr().out
    saved = yaml.safe_load((workdir / "recipe.yaml").read_text())["optim"]
    assert (saved["name"], saved["decay_rate"], saved["min_dim_size_to_factor"]) == ("adafactor", 0.7, 8)
    assert np.isfinite(train_losses(workdir)).all() and len(train_losses(workdir)) == 4
    # the checkpoint holds Adafactor's factored statistics: a row and a column vector per large kernel
    tree = ocp.PyTreeCheckpointer().metadata(workdir / "checkpoints" / "4" / "state").item_metadata.tree
    paths = ["/".join(str(getattr(k, "key", k)) for k in p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    assert any("v_row" in p for p in paths) and any("v_col" in p for p in paths)
    assert not any("/mu/" in p or p.endswith("/mu") for p in paths)  # no Adam moment
    # and it moved the params differently from AdamW on the same batches
    adam = tmp_path / "adam"
    other = write_recipe(tmp_path / "a.yaml", optim={"learning_rate": 1e-2, "warmup_steps": 0, "schedule": "constant"},
                         train={"steps": 4, "log_every": 1})
    assert main(["train", "--config", str(other), "--workdir", str(adam)]) == 0
    a, b = final_params(workdir), final_params(adam)
    assert not np.allclose(a["bert/encoder/layer/0/intermediate/dense/kernel"],
                           b["bert/encoder/layer/0/intermediate/dense/kernel"])


# ---- the point an optimizer evaluates at: OptimSection.eval_params, the one hook evaluation and export read ----
@dataclasses.dataclass
class HalfEvalSection(OPTIMIZERS["adamw"]):
    """AdamW that trains as AdamW but is evaluated and exported at half its params: a stand-in for an
    optimizer whose evaluation point is not its training point (schedule-free AdamW's average)."""
    name: str = "half_eval"

    def eval_params(self, state):
        return jax.tree_util.tree_map(lambda p: p / 2, state.params)


@pytest.mark.parametrize("strategy", ["mesh", "pmap"])
def test_each_runner_reads_the_params_through_the_optimizers_eval_params(strategy, monkeypatch):
    from jaxbert.engine.parallel import make_runner
    from jaxbert.engine.session import prepare_runner
    from jaxbert.model.classes import build_model
    monkeypatch.setitem(OPTIMIZERS, "half_eval", HalfEvalSection)
    r = R.from_dict({**TINY, "optim": {**TINY["optim"], "name": "half_eval"}, "parallel": {"strategy": strategy}})
    runner = make_runner(r.parallel)
    model = build_model(r.model.model_class, r.model_config(), r.model.options())
    dummy = jnp.zeros((1, r.data.seq_len), jnp.int32)
    prepare_runner(runner, model, r.optim, 4, 0, (dummy, dummy), True)
    state = runner.create_state()
    trained = jax.device_get(runner.to_saved(state).params)
    read = jax.device_get(runner.params_of(state, saved=True))
    assert jax.tree_util.tree_structure(read) == jax.tree_util.tree_structure(trained)
    assert all(np.array_equal(a, b / 2) for a, b in zip(jax.tree_util.tree_leaves(read),
                                                          jax.tree_util.tree_leaves(trained)))
    # what the eval step gets: the runner's layout (pmap: one copy per device)
    lead = (len(runner.local_devices),) if strategy == "pmap" else ()
    kernel = jax.tree_util.tree_leaves(runner.params_of(state))[0]
    assert kernel.shape == lead + jax.tree_util.tree_leaves(trained)[0].shape
    # an optimizer that does not override the hook is read with no copy: the state's own arrays
    plain = R.from_dict({**TINY, "parallel": {"strategy": strategy}})
    prepare_runner(runner, model, plain.optim, 4, 0, (dummy, dummy), True)
    assert runner.params_of(state) is state.params


def test_evaluation_and_export_read_the_optimizers_eval_params(tmp_path, monkeypatch):
    from jaxbert import from_pretrained
    from jaxbert.model.params import flatten
    from jaxbert.workdir import read_params
    monkeypatch.setitem(OPTIMIZERS, "half_eval", HalfEvalSection)
    runs = {}
    for name in ("adamw", "half_eval"):
        path = write_recipe(tmp_path / f"{name}.yaml", optim={"name": name}, train={"steps": 4},
                            outputs={"plot": False, "export": True})
        assert main(["train", "--config", str(path), "--workdir", str(tmp_path / name)]) == 0
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs[name] = (final_params(tmp_path / name), next(r["eval_loss"] for r in rows if "eval_loss" in r))
    (adam, adam_eval), (half, half_eval) = runs["adamw"], runs["half_eval"]
    # it trains as AdamW: the checkpoints (the point trained at, which a resume needs) are the same ...
    assert adam.keys() == half.keys() and all(np.array_equal(adam[k], half[k]) for k in adam)
    # ... evaluation read the other point: not the loss of the params trained ...
    assert np.isfinite(half_eval) and abs(half_eval - adam_eval) > 1e-3, (half_eval, adam_eval)
    # ... and the export holds it: half the checkpoint's params
    _, exported = from_pretrained(tmp_path / "half_eval" / "hf")
    exported = {k: np.asarray(v) for k, v in flatten(exported).items()}
    checkpoint = flatten(read_params(tmp_path / "half_eval")[0])
    assert exported.keys() == checkpoint.keys()
    assert all(np.array_equal(exported[k], np.asarray(checkpoint[k]) / 2) for k in exported)


def test_the_cli_says_when_a_recipe_uses_stable_adamws_old_weight_decay_key(tmp_path, capsys):
    """Python hides a DeprecationWarning outside __main__: `jaxbert train` prints it, one line on stderr."""
    path = write_recipe(tmp_path / "r.yaml", optim={"name": "stable_adamw", "weight_decay": 3e-5},
                        train={"steps": 1, "eval_batches": 1})
    assert main(["train", "--config", str(path), "--workdir", str(tmp_path / "run")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert err == ["jaxbert train: warning: recipe key optim.weight_decay of optimizer stable_adamw is now "
                   "optim.decoupled_weight_decay (same meaning); the old name goes in a later release"], err
    new = write_recipe(tmp_path / "n.yaml", optim={"name": "stable_adamw", "decoupled_weight_decay": 3e-5},
                       train={"steps": 1, "eval_batches": 1})
    assert main(["train", "--config", str(new), "--workdir", str(tmp_path / "run2")]) == 0
    assert "warning" not in capsys.readouterr().err
