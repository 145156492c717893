"""Recipes (typed YAML, errors naming the key), schedules, weight-decay masks, TensorBoard records."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import yaml

from tests.helpers.tfevents import _crc32c, scalars
from jaxbert.train import recipe as R
from jaxbert.model.flops import train_flops_per_token
from jaxbert.engine.metrics_log import MetricsWriter
from jaxbert.engine.optim import decay_mask, make_optimizer, make_schedule
from jaxbert.train.recipe import OptimSection, RecipeError


def _write(tmp_path, data) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name", ["tiny-demo", "bert-base-phase1", "bert-base-phase2", "bert-large-lamb",
                                  "cramming-1day"])
def test_every_shipped_recipe_loads_and_builds_its_model_config(name):
    r = R.load(name)
    assert r.name == name
    cfg = r.model_config(vocab_size=1000)
    assert cfg.num_hidden_layers >= 1 and r.train.steps > 0


def test_shipped_recipes_say_the_published_numbers():
    lamb = R.load("bert-large-lamb")
    assert lamb.optim.name == "lamb"
    # You et al.: 64k sequences per step in phase 1, as per-device batch x devices x accumulation
    assert lamb.train.per_device_batch_size * 1024 * lamb.train.accum_steps == 65536
    phase2 = R.load("bert-base-phase2")
    assert phase2.data.seq_len == 512 and phase2.model.init_from
    assert R.load("bert-base-phase1").data.seq_len == 128


def test_unknown_key_is_an_error_naming_it(tmp_path):
    with pytest.raises(RecipeError, match=r"optim\.learning_rat: unknown key"):
        R.load(_write(tmp_path, {"optim": {"learning_rat": 1e-3}}))
    with pytest.raises(RecipeError, match=r"trian: unknown key"):
        R.load(_write(tmp_path, {"trian": {}}))
    with pytest.raises(RecipeError, match=r"model\.config\.hiden_size: not a BertConfig field"):
        R.load(_write(tmp_path, {"model": {"config": {"hiden_size": 8}}})).model_config()


def test_wrong_type_is_an_error_naming_key_and_value(tmp_path):
    with pytest.raises(RecipeError, match=r"train\.steps: expected an integer, got '10k'"):
        R.load(_write(tmp_path, {"train": {"steps": "10k"}}))
    with pytest.raises(RecipeError, match=r"train\.steps: expected an integer, got True"):
        R.load(_write(tmp_path, {"train": {"steps": True}}))
    with pytest.raises(RecipeError, match=r"parallel\.strategy: 'pmapp' is not one of"):
        R.load(_write(tmp_path, {"parallel": {"strategy": "pmapp"}}))
    with pytest.raises(RecipeError, match=r"model\.remat_policy: 'ofload' is not one of"):
        R.load(_write(tmp_path, {"model": {"remat_policy": "ofload"}}))
    with pytest.raises(RecipeError, match=r"optim\.mu_dtype: 'float16' is not one of"):
        R.load("tiny-demo", ["optim.mu_dtype=float16"])
    assert R.load(_write(tmp_path, {"model": {"remat_policy": "offload"}})).model.remat_policy == "offload"
    with pytest.raises(RecipeError, match=r"optim: expected a mapping"):
        R.load(_write(tmp_path, {"optim": 3}))


def test_model_options_reach_the_model_the_loop_builds():
    from jaxbert.model.classes import build_model
    r = R.load("tiny-demo", ["model.remat_policy=offload", "model.attention_chunks=2", "model.ffn_chunks=4",
                             "model.scan_layers=true", "model.dropout_impl=threefry"])
    m = build_model(r.model.model_class, r.model_config(), r.model.options())
    o = m.options
    assert (o.remat_policy, o.attention_chunks, o.ffn_chunks, o.scan_layers, o.dropout_impl) == \
        ("offload", 2, 4, True, "threefry")


def test_set_overrides_are_parsed_and_checked(tmp_path):
    path = _write(tmp_path, {"optim": {"learning_rate": 1e-3}})
    r = R.load(path, ["optim.learning_rate=3e-4", "train.steps=7", "optim.clip_norm=null",
                      "model.config.hidden_size=64", "outputs.fill_mask=['a [MASK] b']"])
    assert r.optim.learning_rate == pytest.approx(3e-4) and isinstance(r.optim.learning_rate, float)
    assert r.train.steps == 7 and r.optim.clip_norm is None
    assert r.model.config == {"hidden_size": 64} and r.outputs.fill_mask == ["a [MASK] b"]
    with pytest.raises(RecipeError, match=r"train\.stepz: unknown key"):
        R.load(path, ["train.stepz=3"])
    with pytest.raises(RecipeError, match=r"expected key=value"):
        R.load(path, ["train.steps"])
    with pytest.raises(RecipeError, match=r"optim\.b1: expected a number, got 'x'"):
        R.load(path, ["optim.b1=x"])


def test_cli_reports_recipe_errors_with_exit_code_2(tmp_path, capsys):
    from jaxbert.cli.main import main
    assert main(["train", "--config", _write(tmp_path, {"data": {"seq_lenn": 8}})]) == 2
    assert "data.seq_lenn: unknown key" in capsys.readouterr().err
    assert main(["train", "--set", "optim.name=sgd"]) == 2
    assert "optim.name: 'sgd' is not one of" in capsys.readouterr().err


def test_the_deprecated_bert_config_shim_is_gone_and_model_config_gives_any_family():
    """0.3.0 removes what 0.2.0 deprecated: Recipe.bert_config (model_config returns the config class of
    the model's family); the recipe-key renames that warn stay, since they guard users' YAML files."""
    assert not hasattr(R.Recipe, "bert_config")
    r = R.load("tiny-demo", ["model.preset=modernbert", "model.model_class=ModernBertForMaskedLM",
                             "model.config={hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2}"])
    assert type(r.model_config()).__name__ == "ModernBertConfig"


def test_effective_recipe_round_trips(tmp_path):
    r = R.load("tiny-demo", ["train.steps=5"])
    path = R.save_effective(r, tmp_path)
    again = R.from_dict(yaml.safe_load(path.read_text()))
    assert again == r and again.train.steps == 5


def test_schedules_hit_their_corners():
    o = OptimSection(learning_rate=1.0, warmup_steps=10, schedule="linear", end_lr_factor=0.0)
    s = make_schedule(o, 110)
    assert [float(s(t)) for t in (0, 5, 10, 60, 110)] == pytest.approx([0, 0.5, 1.0, 0.5, 0.0], abs=1e-6)
    s = make_schedule(OptimSection(learning_rate=1.0, warmup_steps=0, schedule="polynomial",
                                   decay_power=2.0, end_lr_factor=0.0), 100)
    assert float(s(50)) == pytest.approx(0.25, abs=1e-6)  # (1 - 1/2)^2
    s = make_schedule(OptimSection(learning_rate=2.0, warmup_steps=10, schedule="wsd",
                                   decay_fraction=0.2, end_lr_factor=0.1), 110)
    # warmup 10, stable until 110 - 22 = 88, then linear to 0.2 at 110
    assert [float(s(t)) for t in (5, 50, 88, 99, 110)] == pytest.approx([1.0, 2.0, 2.0, 1.1, 0.2], abs=1e-5)


def test_one_minus_sqrt_decay_hits_hand_computed_values():
    # warmup 20 to peak 2, hold until 200 - 100 = 100, then 2e-3 + (2 - 2e-3) * (1 - sqrt((t - 100) / 100))
    s = make_schedule(OptimSection(learning_rate=2.0, warmup_steps=20, schedule="1-sqrt",
                                   decay_fraction=0.5, end_lr_factor=0.001), 200)
    assert [float(s(t)) for t in (10, 50, 100, 125, 164, 181, 200)] == pytest.approx(
        [1.0, 2.0, 2.0, 1.001, 0.4016, 0.2018, 0.002], abs=1e-5)
    # ModernBERT's decay phase: the whole run decays from the peak, no warmup
    s = make_schedule(OptimSection(learning_rate=3e-4, schedule="1-sqrt", decay_fraction=1.0), 400)
    assert [float(s(t)) for t in (0, 100, 256, 400)] == pytest.approx([3e-4, 1.5e-4, 6e-5, 0.0], abs=1e-9)


@pytest.mark.parametrize("schedule", ["1-sqrt", "wsd", "linear"])
def test_a_decay_longer_than_the_steps_after_warmup_still_ends_at_the_end_lr(schedule):
    """decay_fraction 1 with a warmup: the decay spans the steps after warmup (900 of 1,000), so the
    last step reaches end_lr_factor * peak (1-sqrt ended at 0.052, wsd at 0.10: they decayed over 1,000)."""
    o = OptimSection(learning_rate=1.0, warmup_steps=100, schedule=schedule, decay_fraction=1.0,
                     end_lr_factor=0.001)
    s = make_schedule(o, 1000)
    assert float(s(100)) == pytest.approx(1.0) and float(s(1000)) == pytest.approx(0.001, rel=1e-5)
    assert float(s(550)) == pytest.approx({"1-sqrt": 0.001 + 0.999 * (1 - math.sqrt(0.5)),
                                           "wsd": 0.5005, "linear": 0.5005}[schedule], rel=1e-5)
    # where warmup + decay fit in the run nothing changes (the values the schedules gave before)
    o = OptimSection(learning_rate=1.0, warmup_steps=100, schedule=schedule, decay_fraction=0.3, end_lr_factor=0.01)
    s = make_schedule(o, 1000)
    expected = {"1-sqrt": [0.0, 0.5, 1.0, 1.0, 0.505, 0.2999643, 0.0116514, 0.01],
                "wsd": [0.0, 0.5, 1.0, 1.0, 0.7525, 0.505, 0.0133, 0.01],
                "linear": [0.0, 0.5, 1.0, 0.34, 0.2575, 0.175, 0.0111, 0.01]}[schedule]
    assert [float(s(t)) for t in (0, 50, 100, 700, 775, 850, 999, 1000)] == pytest.approx(expected, abs=1e-6)


def test_schedules_run_in_float64_under_x64():
    """optax counts in int32, and int32 / int is float32 even with x64 on: the schedule
    must not hand a float64 run float32 learning rates (5e-4 in float32 is 5.0000002e-4)."""
    o = OptimSection(learning_rate=1e-3, warmup_steps=2, schedule="linear")
    with jax.enable_x64(True):
        lr = make_schedule(o, 10)(jnp.asarray(1, jnp.int32))
        assert lr.dtype == jnp.float64 and float(lr) == 5e-4
        lr = make_schedule(o, 10)(jnp.asarray(6, jnp.int32))  # decay: 1e-3 * (1 - 4/8)
        assert float(lr) == 5e-4
    assert make_schedule(o, 10)(1).dtype == jnp.float32  # without x64, as before


def test_weight_decay_spares_biases_and_layernorm():
    params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
              "LayerNorm": {"scale": jnp.ones(2), "bias": jnp.ones(2)},
              "word_embeddings": {"embedding": jnp.ones((3, 2))}}
    mask = decay_mask(params)
    assert mask == {"dense": {"kernel": True, "bias": False}, "LayerNorm": {"scale": False, "bias": False},
                    "word_embeddings": {"embedding": True}}
    for name in ("adamw", "lamb"):
        tx, _ = make_optimizer(OptimSection(name=name, learning_rate=0.1, weight_decay=0.5, clip_norm=None,
                                            schedule="constant"), 10)
        zero = jax.tree_util.tree_map(jnp.zeros_like, params)
        updates, _ = tx.update(zero, tx.init(params), params)
        # zero gradients: only decay moves anything, and only the decayed leaves
        assert float(jnp.abs(updates["dense"]["bias"]).max()) == 0.0
        assert float(jnp.abs(updates["LayerNorm"]["scale"]).max()) == 0.0
        assert float(jnp.abs(updates["dense"]["kernel"]).max()) > 0.0


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_a_bfloat16_first_moment_is_stored_narrow_and_rounds_only_the_moment(name):
    params = {"w": jnp.linspace(-1.0, 1.0, 64).reshape(8, 8), "bias": jnp.zeros(8)}
    grads = {"w": jnp.sin(jnp.arange(64.0)).reshape(8, 8) * 1e-3, "bias": jnp.full((8,), 3e-4)}
    out = {}
    for mu_dtype in (None, "bfloat16"):
        tx, _ = make_optimizer(OptimSection(name=name, learning_rate=0.1, clip_norm=None, schedule="constant",
                                            mu_dtype=mu_dtype), 10)
        state, p = tx.init(params), params
        for _ in range(3):
            updates, state = tx.update(grads, state, p)
            p = optax.apply_updates(p, updates)
        out[mu_dtype] = (optax.tree_utils.tree_get(state, "mu"), optax.tree_utils.tree_get(state, "nu"), p)
    (mu32, nu32, p32), (mu16, nu16, p16) = out[None], out["bfloat16"]
    assert mu16["w"].dtype == jnp.bfloat16 and mu32["w"].dtype == jnp.float32
    assert nu16["w"].dtype == jnp.float32 and np.array_equal(nu16["w"], nu32["w"])  # the second moment untouched
    # the narrow moment is the wide one to within bf16's rounding (8 significant bits), not equal to it
    np.testing.assert_allclose(np.asarray(mu16["w"], np.float32), mu32["w"], rtol=2 ** -7)
    assert not np.array_equal(np.asarray(mu16["w"], np.float32), mu32["w"])
    np.testing.assert_allclose(p16["w"], p32["w"], rtol=0, atol=0.1 * 3 * 2 ** -7)


def test_lamb_is_optax_lamb_behind_the_clipping_when_the_moment_keeps_the_params_dtype():
    # Checkpoints of LAMB runs hold this state: its tree and arithmetic must stay optax.lamb's.
    o = OptimSection(name="lamb", learning_rate=0.1, clip_norm=1.0, schedule="constant", weight_decay=0.01)
    tx, schedule = make_optimizer(o, 10)
    ref = optax.chain(optax.clip_by_global_norm(1.0), optax.lamb(schedule, b1=o.b1, b2=o.b2, eps=o.eps,
                                                            weight_decay=o.weight_decay, mask=decay_mask))
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "bias": jnp.ones(4)}
    grads = {"w": jnp.cos(jnp.arange(12.0)).reshape(3, 4), "bias": jnp.full((4,), 0.5)}
    s1, s2 = tx.init(params), ref.init(params)
    assert jax.tree_util.tree_structure(s1) == jax.tree_util.tree_structure(s2)
    for _ in range(3):
        (u1, s1), (u2, s2) = tx.update(grads, s1, params), ref.update(grads, s2, params)
        for a, b in zip(jax.tree_util.tree_leaves((u1, s1)), jax.tree_util.tree_leaves((u2, s2))):
            assert np.array_equal(a, b)


def test_a_float32_first_moment_for_bfloat16_params():
    params = {"w": jnp.ones((4, 4), jnp.bfloat16)}
    for mu_dtype, want in ((None, jnp.bfloat16), ("float32", jnp.float32)):
        tx, _ = make_optimizer(OptimSection(mu_dtype=mu_dtype), 10)
        assert optax.tree_utils.tree_get(tx.init(params), "mu")["w"].dtype == want


def test_clipping_bounds_the_global_norm_before_adam_sees_it():
    tx, _ = make_optimizer(OptimSection(name="adamw", learning_rate=1.0, clip_norm=0.5, weight_decay=0.0,
                                        b1=0.9, schedule="constant"), 10)
    params = {"w": jnp.zeros(4)}
    _, state = tx.update({"w": jnp.full((4,), 100.0)}, tx.init(params), params)
    mu = optax.tree_utils.tree_get(state, "mu")  # (1 - b1) * clipped gradient
    assert float(optax.global_norm(mu)) == pytest.approx(0.1 * 0.5, rel=1e-5)


def test_tensorboard_events_read_back_by_an_independent_reader(tmp_path):
    assert _crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    w = MetricsWriter(tmp_path)
    w.write(3, {"loss": 2.5, "lr": 1e-3, "note": "text", "flag": True})
    w.write(6, {"loss": 1.25})
    w.close()
    (events,) = (tmp_path / "tensorboard").glob("events.out.tfevents.*")
    version, values = scalars(events)
    assert version == "brain.Event:2"
    assert values == {(3, "loss"): 2.5, (3, "lr"): np.float32(1e-3), (6, "loss"): 1.25}
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [3, 6]


def test_flops_per_token_for_bert_base():
    """0.67 GFLOP/token with the head at every position, 0.55 at 15% masked positions only."""
    from jaxbert import preset
    cfg = preset("bert-base-uncased")
    full = train_flops_per_token(cfg, 128, 1.0)
    masked = train_flops_per_token(cfg, 128, 0.15)
    assert full / 1e9 == pytest.approx(0.67, abs=0.01) and masked / 1e9 == pytest.approx(0.55, abs=0.01)
    assert np.isfinite(full)


@pytest.mark.parametrize("override,key", [
    ("optim.clip_norm=-1", "optim.clip_norm"), ("optim.clip_norm=0", "optim.clip_norm"),
    ("optim.b1=1.5", "optim.b1"), ("optim.b1=-0.1", "optim.b1"), ("optim.b2=1", "optim.b2"),
    ("optim.eps=-1", "optim.eps"), ("optim.eps=0", "optim.eps"), ("optim.weight_decay=-1", "optim.weight_decay"),
    ("optim.end_lr_factor=5", "optim.end_lr_factor"), ("optim.decay_power=-1", "optim.decay_power"),
    ("optim.decay_fraction=0", "optim.decay_fraction"), ("optim.warmup_steps=-1", "optim.warmup_steps"),
    ("optim.learning_rate=0", "optim.learning_rate"), ("optim.learning_rate=.nan", "optim.learning_rate"),
    ("optim.learning_rate=.inf", "optim.learning_rate"), ("optim.learning_rate=1e400", "optim.learning_rate"),
    ("data.seq_len=0", "data.seq_len"), ("data.mask_rate=0", "data.mask_rate"),
    ("data.mask_rate=1.5", "data.mask_rate"), ("data.eval_mask_rate=0", "data.eval_mask_rate"),
    ("data.max_predictions=-3", "data.max_predictions"), ("data.max_predictions=0", "data.max_predictions"),
    ("data.validation_fraction=1", "data.validation_fraction"),
    ("data.validation_fraction=0", "data.validation_fraction"),  # data built here: evaluation needs rows
    ("data.vocab_size=0", "data.vocab_size"),
    ("train.steps=0", "train.steps"), ("train.steps=9223372036854775808", "train.steps"),
    ("train.per_device_batch_size=0", "train.per_device_batch_size"), ("train.accum_steps=0", "train.accum_steps"),
    ("train.seed=-1", "train.seed"), ("train.seed=4294967296", "train.seed"),
    ("train.seed=9223372036854775808", "train.seed"), ("train.log_every=0", "train.log_every"),
    ("train.eval_every=-1", "train.eval_every"), ("train.eval_batches=-1", "train.eval_batches"),
    ("checkpoint.every_steps=0", "checkpoint.every_steps"), ("checkpoint.keep=0", "checkpoint.keep"),
    ("parallel.num_processes=0", "parallel.num_processes"),
    ("parallel.coordinator_address=bogus", "parallel.coordinator_address"),
    ("parallel.coordinator_address=host:99999", "parallel.coordinator_address"),
    ("optim.weight_decay=9223372036854775808", "optim.weight_decay"),
])
def test_every_numeric_value_is_checked_against_its_meaning(override, key):
    with pytest.raises(RecipeError, match=key.replace(".", r"\.") + ":"):
        R.load("tiny-demo", [override])


def test_values_at_the_edges_of_their_ranges_load():
    r = R.load("tiny-demo", ["optim.clip_norm=null", "optim.b1=0", "optim.weight_decay=0", "optim.end_lr_factor=1",
                             "data.mask_rate=1", "train.eval_every=0", "train.eval_batches=0",
                             "train.seed=4294967295", "parallel.coordinator_address=10.0.0.1:1234",
                             "data.dir=/some/data", "data.validation_fraction=0"])
    assert r.optim.clip_norm is None and r.train.seed == 2**32 - 1
    assert R.load("tiny-demo", ["parallel.coordinator_address=auto"]).parallel.coordinator_address == "auto"


def test_a_set_value_that_is_not_yaml_names_the_key():
    with pytest.raises(RecipeError, match=r"--set optim\.learning_rate: '\[' is not a YAML value"):
        R.load("tiny-demo", ["optim.learning_rate=["])


def test_a_name_that_is_no_shipped_recipe_lists_the_shipped_ones():
    with pytest.raises(RecipeError, match="nope: neither a YAML file nor a shipped recipe") as e:
        R.load("nope")
    assert all(name in str(e.value) for name in R.recipe_names())


def test_seq_len_beyond_the_position_table_is_refused_when_the_recipe_loads():
    with pytest.raises(RecipeError, match=r"data\.seq_len: 128 .*model\.config\.max_position_embeddings 64"):
        R.load("tiny-demo", ["data.seq_len=128", "model.config.max_position_embeddings=64"])
    # RoBERTa's positions start at pad_token_id + 1: 64 positions with pad id 1 hold 62 tokens
    with pytest.raises(RecipeError, match=r"data\.seq_len: 64 .*max_position_embeddings 64 less pad_token_id"):
        R.load("roberta-tiny-demo", ["data.seq_len=64", "model.config.max_position_embeddings=64",
                                     "model.config.pad_token_id=1"])
    assert R.load("roberta-tiny-demo", ["data.seq_len=62", "model.config.max_position_embeddings=64",
                                        "model.config.pad_token_id=1"]).data.seq_len == 62
