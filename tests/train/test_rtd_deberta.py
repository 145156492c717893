"""DeBERTa-v3's replaced-token detection: jaxbert's discriminator head (DebertaV2ForReplacedTokenDetection) against
NumPy, a GDES `jaxbert train` run on a tiny DeBERTa that stops and resumes bit-exactly, its export read back by
transformers' DebertaV2Model / DebertaV2ForMaskedLM and by jaxbert (the head beside the backbone), fine-tuning from
the workdir, and the refusals in one line."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import yaml

from jaxbert.cli.main import main
from jaxbert.train import recipe as recipe_lib
from jaxbert.train.recipe import RecipeError
from tests.helpers.runs import assert_recipe_refused, flat_params, untimed_rows

DEBERTA = {"preset": "deberta-v2", "model_class": "DebertaV2ForReplacedTokenDetection", "config": {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48, "vocab_size": 64,
    "max_position_embeddings": 32, "relative_attention": True, "position_buckets": 4, "max_relative_positions": 8,
    "pos_att_type": "p2c|c2p", "share_att_key": True, "norm_rel_ebd": "layer_norm", "position_biased_input": False,
    "type_vocab_size": 0, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}}
RTD = {
    "name": "rtd-deberta-test", "model": DEBERTA,
    "data": {"source": "synthetic", "seq_len": 16, "mask_rate": 0.25},
    "optim": {"learning_rate": 3e-3, "warmup_steps": 2, "schedule": "linear"},
    "train": {"objective": "rtd", "steps": 6, "per_device_batch_size": 4, "accum_steps": 2, "log_every": 2,
              "eval_every": 0, "eval_batches": 1},
    "rtd": {"generator": {"depth": "1/2"}, "weight": 50, "sharing": "gdes"},
    "checkpoint": {"every_steps": 3, "keep": 5},
    "outputs": {"plot": False, "export": True},
}


def _recipe(**patch) -> dict:
    data = copy.deepcopy(RTD)
    for section, values in patch.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    return data


def test_rtd_head_against_numpy():
    """The discriminator's logits = classifier(act(dense(LayerNorm(h + h[:, 0])))) on the backbone's last state h,
    written here in NumPy (erf GELU, LayerNorm eps 1e-7) from the module's own params."""
    import jax
    import jax.numpy as jnp
    from jaxbert.model.families import FAMILIES
    from jaxbert.model.options import ModelOptions
    r = recipe_lib.from_dict(RTD)
    cfg = r.model_config(64)
    family = FAMILIES["deberta-v2"]
    opts = ModelOptions(dtype=jnp.float32, param_dtype=jnp.float32)
    disc = family.build("DebertaV2ForReplacedTokenDetection", cfg, opts)
    ids = jnp.asarray(np.random.RandomState(1).randint(4, 64, (2, 12)))
    params = disc.init(jax.random.PRNGKey(3), ids)["params"]
    head = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params["mask_predictions"])
    rs = np.random.RandomState(2)  # away from the init's zero biases and unit scales, so each one shows
    head = jax.tree_util.tree_map(lambda x: x + 0.3 * rs.standard_normal(x.shape), head)
    params = {**params, "mask_predictions": jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), head)}
    out = disc.apply({"params": params}, ids)
    h = np.asarray(out.last_hidden_state, np.float64)  # the backbone's last state, as DebertaV2Model gives it
    x = h + h[:, :1]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-7)
    x = x * head["LayerNorm"]["scale"] + head["LayerNorm"]["bias"]
    x = x @ head["dense"]["kernel"] + head["dense"]["bias"]
    x = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    want = (x @ head["classifier"]["kernel"] + head["classifier"]["bias"])[..., 0]
    assert out.logits.shape == (2, 12) and np.abs(want).max() > 0.1
    np.testing.assert_allclose(np.asarray(out.logits), want, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("patch, key, words", [
    ({"model": {**DEBERTA, "model_class": "DebertaV2ForMaskedLM"}}, "model.model_class",
     "DebertaV2ForReplacedTokenDetection"),
    ({"train": {**RTD["train"], "objective": "mlm"}}, "model.model_class", "is a discriminator"),
    ({"rtd": {"generator": {"width": "1/2"}}}, "rtd.sharing", "embedding width"),  # gdes: E_G 16 wide, E_delta 32
    ({"rtd": {"generator": {"num_hidden_layers": 3}}}, "rtd.generator", "larger than the discriminator's 2"),
])
def test_deberta_rtd_refusals_name_the_key_and_write_nothing(tmp_path, capsys, patch, key, words):
    data = _recipe(**patch)
    assert_recipe_refused(data, key, words, tmp_path, capsys)


@pytest.fixture(scope="module")
def deberta_run(tmp_path_factory):
    """(recipe path, workdir) of one 6-step GDES run on a tiny DeBERTa-v3 that exported both models to WORKDIR/hf."""
    root = tmp_path_factory.mktemp("rtd-deberta")
    path = root / "rtd.yaml"
    path.write_text(yaml.safe_dump(RTD))
    assert main(["train", "--config", str(path), "--workdir", str(root / "straight")]) == 0
    return path, root / "straight"


def test_deberta_rtd_run_resumes_bit_exactly(deberta_run, tmp_path, capsys, compile_cache):
    path, straight = deberta_run
    stopped = tmp_path / "stopped"
    assert main(["train", "--config", str(path), "--workdir", str(stopped), "--stop-after", "4"]) == 0
    assert main(["train", "--config", str(path), "--workdir", str(stopped)]) == 0
    assert "resumed from" in capsys.readouterr().out
    a, b = flat_params(straight), flat_params(stopped)
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    # GDES: the discriminator's word table is E_delta, moved off zero by the RTD loss alone; the relative
    # embeddings are each model's own (not shared)
    assert np.abs(a["discriminator/deberta/embeddings/word_embeddings/embedding"]).max() > 0
    assert "generator/deberta/encoder/rel_embeddings/embedding" in a
    assert not np.array_equal(a["generator/deberta/encoder/rel_embeddings/embedding"],
                              a["discriminator/deberta/encoder/rel_embeddings/embedding"])
    assert "discriminator/mask_predictions/classifier/kernel" in a
    rows = untimed_rows(straight)
    assert untimed_rows(stopped) == rows
    last = [r for r in rows if "rtd_loss" in r][-1]
    assert last["step"] == 6 and 0 < last["replaced_fraction"] <= 1 and 0 <= last["rtd_auc"] <= 1
    assert last["loss"] == pytest.approx(last["mlm_loss"] + 50 * last["rtd_loss"])


def test_deberta_export_read_by_transformers_and_by_jaxbert(deberta_run, tmp_path):
    """WORKDIR/hf: transformers' DebertaV2Model (the discriminator's backbone, its word table E_G + E_delta) and
    DebertaV2ForMaskedLM (the generator) give jaxbert's outputs; jaxbert reads the discriminator back whole (the
    backbone and rtd_head.safetensors) exactly; `jaxbert export WORKDIR DST` writes the same files."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import jax.numpy as jnp
    from flax import traverse_util
    from jaxbert.train import rtd_export
    _, workdir = deberta_run
    hf = workdir / "hf"
    raw = flat_params(workdir)
    r = recipe_lib.from_dict(RTD)
    joint = traverse_util.unflatten_dict({tuple(k.split("/")): jnp.asarray(v) for k, v in raw.items()})
    (gen_model, gen), (disc_model, disc) = rtd_export.models_for_export(r, r.model_config(64), joint)
    assert json.loads((hf / "config.json").read_text())["architectures"] == ["DebertaV2Model"]
    assert (hf / rtd_export.HEAD_FILE).is_file()
    ids = np.random.RandomState(0).randint(4, 64, (2, 12))
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    d_t = transformers.DebertaV2Model.from_pretrained(hf).eval()
    g_t = transformers.DebertaV2ForMaskedLM.from_pretrained(hf / "generator").eval()
    assert g_t.config.num_hidden_layers == 1 and d_t.config.num_hidden_layers == 2
    with torch.no_grad():
        d_ref = d_t(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
        g_ref = g_t(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    d_out = disc_model.apply({"params": disc}, jnp.asarray(ids), attention_mask=jnp.asarray(mask),
                             output_hidden_states=True)
    g_ours = np.asarray(gen_model.apply({"params": gen}, jnp.asarray(ids), attention_mask=jnp.asarray(mask)).logits)
    real = mask.astype(bool)
    d_ours = np.asarray(d_out.last_hidden_state)
    np.testing.assert_allclose(d_ours[real], d_ref[real], atol=1e-4 * np.abs(d_ref).max())
    np.testing.assert_allclose(g_ours[real], g_ref[real], atol=1e-4 * np.abs(g_ref).max())
    # the exported word table is E_G + E_delta of the checkpoint
    e_g = raw["generator/deberta/embeddings/word_embeddings/embedding"]
    e_d = raw["discriminator/deberta/embeddings/word_embeddings/embedding"]
    np.testing.assert_array_equal(d_t.embeddings.word_embeddings.weight.detach().numpy(), e_g + e_d)
    # jaxbert reads the discriminator back whole: every param equal to the run's, so its logits too
    cfg, name, back = rtd_export.read_discriminator(hf)
    assert name == "DebertaV2ForReplacedTokenDetection"
    flat_a, flat_b = traverse_util.flatten_dict(back), traverse_util.flatten_dict(disc)
    assert set(flat_a) == set(flat_b) and all(np.array_equal(np.asarray(flat_a[k]), np.asarray(flat_b[k]))
                                              for k in flat_a)
    # `jaxbert export` of the workdir writes the same files
    assert main(["export", str(workdir), str(tmp_path / "out")]) == 0
    for rel in ("model.safetensors", rtd_export.HEAD_FILE, "generator/model.safetensors"):
        assert (tmp_path / "out" / rel).read_bytes() == (hf / rel).read_bytes(), rel


def test_finetune_reads_a_deberta_rtd_workdir_as_its_exported_discriminator(deberta_run, capsys):
    """`jaxbert finetune --model WORKDIR`: the engine's encoder is the exported backbone, exactly (E_G + E_delta)."""
    from flax import traverse_util
    from jaxbert.finetune.model import load_task_model
    _, workdir = deberta_run
    capsys.readouterr()
    ours = load_task_model(workdir, "classification", ["a", "b"])
    assert "reading its discriminator" in capsys.readouterr().out
    exported = load_task_model(workdir / "hf", "classification", ["a", "b"])
    assert ours.class_name == exported.class_name == "DebertaV2ForSequenceClassification"
    a, b = (traverse_util.flatten_dict(m.params) for m in (ours, exported))
    encoder = [k for k in a if k[0] == "deberta"]
    assert len(encoder) > 20 and set(encoder) == {k for k in b if k[0] == "deberta"}
    for k in encoder:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k


# ---- objective parity: three float64 steps against a torch reference (GDES) ---------------------------------------

def _torch_discriminator(torch, transformers, cfg):
    """transformers' DebertaV2Model under `deberta` and, under `mask_predictions`, the head written here in torch:
    LayerNorm(h + h[:, 0]) -> Linear H -> H -> GELU (erf) -> Linear H -> 1."""
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            H = cfg.hidden_size
            self.LayerNorm = torch.nn.LayerNorm(H, eps=cfg.layer_norm_eps)
            self.dense = torch.nn.Linear(H, H)
            self.classifier = torch.nn.Linear(H, 1)

        def forward(self, h):
            x = torch.nn.functional.gelu(self.dense(self.LayerNorm(h + h[:, :1])))
            return self.classifier(x)[..., 0]

    class Discriminator(torch.nn.Module):
        def __init__(self):
            super().__init__()
            hf = transformers.AutoConfig.for_model(**cfg.to_dict())
            hf._attn_implementation = "eager"
            self.deberta = transformers.DebertaV2Model(hf)
            self.mask_predictions = Head()

        def forward(self, input_ids, attention_mask):
            h = self.deberta(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.mask_predictions(h)

    return Discriminator()


def test_deberta_gdes_three_steps_match_a_torch_reference():
    """jaxbert's RTD step on DebertaV2ForMaskedLM + DebertaV2ForReplacedTokenDetection under gdes against torch:
    transformers' DebertaV2ForMaskedLM and DebertaV2Model with the head above, the discriminator called with its word
    table E_G.detach() + E_delta (torch.func.functional_call), torch AdamW; float64, the same replacements fed in:
    loss and gradient norm within 1e-9, every parameter within 1e-8 of its tensor's largest value."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import jax
    import jax.numpy as jnp
    from jaxbert.convert import params_to_state_dict
    from jaxbert.engine.optim import make_optimizer
    from jaxbert.engine.step import TrainState, make_train_step
    from jaxbert.model.families import FAMILIES
    from jaxbert.model.options import ModelOptions
    from jaxbert.parity.compare import numerics
    from jaxbert.parity.torch_reference import _no_decay, warmup_linear
    from jaxbert.parity.trajectory import mlm_batches
    from jaxbert.train import rtd
    from jaxbert.train.recipe import OptimSection
    from jaxbert.train.rtd_recipe import generator_config
    steps, weight, V = 3, 50.0, 64
    # one layer each (the generator's half depth rounds up to 1): the objective is what is compared, and each
    # layer costs compile time
    r = recipe_lib.from_dict(_recipe(model={**DEBERTA, "config": {**DEBERTA["config"], "num_hidden_layers": 1}}))
    disc_cfg = r.model_config(V)
    gen_cfg = generator_config(r.rtd, disc_cfg)
    family = FAMILIES["deberta-v2"]
    optim = OptimSection(learning_rate=2e-3, warmup_steps=1, weight_decay=0.01, clip_norm=1.0)
    rs = np.random.RandomState(0)
    ids = rs.randint(4, V, (4, 20)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    ids[mask == 0] = 0
    batches = mlm_batches({"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}, V, steps,
                          seed=0, pad_id=0)
    RTD_CLASS, MLM = "DebertaV2ForReplacedTokenDetection", "DebertaV2ForMaskedLM"
    with numerics("float64"):
        opts = ModelOptions(dtype=jnp.float64, param_dtype=jnp.float64)
        model = rtd.RtdModel(family.build(MLM, gen_cfg, opts), family.build(RTD_CLASS, disc_cfg, opts), "gdes")
        unbox = lambda t: jax.tree_util.tree_map(lambda x: jnp.asarray(x.unbox() if hasattr(x, "unbox") else x,  # noqa: E731
                                                                       jnp.float64), t, is_leaf=lambda x: hasattr(x, "unbox"))
        params = unbox(model.init_boxed(jax.random.PRNGKey(3), jnp.asarray(ids), jnp.zeros_like(ids))["params"])
        tx, schedule = make_optimizer(optim, steps)
        state = TrainState.create(model.apply, params, tx, schedule)
        step_fn = jax.jit(make_train_step(rtd.rtd_spec(weight)))
        sample = jax.jit(model.apply, static_argnums=3)
        rng = jax.random.PRNGKey(11)

        def dicts(p):
            gen, disc = rtd.export_params(jax.device_get(p), "gdes")
            return params_to_state_dict(gen, gen_cfg, MLM), params_to_state_dict(disc, disc_cfg, RTD_CLASS)
        start, ours = dicts(state.params), []
        for b in batches:
            jb = {k: jnp.asarray(v) for k, v in b.items() if k != "labels"}
            key = jax.random.fold_in(jax.random.fold_in(rng, state.step), 0)
            out = sample({"params": state.params}, jax.tree_util.tree_map(lambda x: x[0], jb), key, False)
            state, m = step_fn(state, jb, rng)
            m = jax.device_get(m)
            loss = m["mlm_loss_sum"] / m["mlm_weight"] + weight * m["rtd_loss_sum"] / m["rtd_weight"]
            ours.append((np.asarray(out["disc_ids"]), float(loss), float(m["grad_norm"]), dicts(state.params)))
    # the reference
    hf_gen = transformers.AutoConfig.for_model(**gen_cfg.to_dict())
    hf_gen._attn_implementation = "eager"
    gen = transformers.DebertaV2ForMaskedLM(hf_gen).to(torch.float64)
    disc = _torch_discriminator(torch, transformers, disc_cfg).to(torch.float64)
    for module, sd in ((gen, start[0]), (disc, start[1])):
        missing, unexpected = module.load_state_dict({k: torch.from_numpy(np.array(v, np.float64)) for k, v in sd.items()},
                                                     strict=False)
        assert not unexpected and all(k.endswith("_ids") or ".decoder." in k for k in missing), (missing, unexpected)
    word = "deberta.embeddings.word_embeddings.weight"
    e_g = gen.deberta.embeddings.word_embeddings.weight
    delta = torch.nn.Parameter((disc.get_parameter(word) - e_g).detach().clone())
    named, seen = [], set()
    for prefix, module in (("generator.", gen), ("", disc)):
        for n, p in module.named_parameters():
            if id(p) not in seen and not (prefix == "" and n == word):
                seen.add(id(p))
                named.append((prefix + n, p))
    named.append((word + ".delta", delta))
    params_t = [p for _, p in named]
    opt = torch.optim.AdamW([{"params": [p for n, p in named if not _no_decay(n)], "weight_decay": optim.weight_decay},
                             {"params": [p for n, p in named if _no_decay(n)], "weight_decay": 0.0}],
                            lr=optim.learning_rate, betas=(optim.b1, optim.b2), eps=optim.eps, foreach=False)
    gen.train(), disc.train()  # the dropout rates are 0
    t = lambda a: torch.from_numpy(np.array(a)).long()  # noqa: E731
    replaced = 0
    for step, (b, (fed, loss, gnorm, (g_sd, d_sd))) in enumerate(zip(batches, ours)):
        for g in opt.param_groups:
            g["lr"] = warmup_linear(step, optim.learning_rate, 1, steps, optim.end_lr_factor)
        opt.zero_grad(set_to_none=True)
        x, m_, labels = t(b["input_ids"][0]), t(b["attention_mask"][0]), t(b["labels"])
        logits = gen(input_ids=x, attention_mask=m_).logits
        mlm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        target = (t(fed) != torch.where(labels >= 0, labels, x)).double()
        z = torch.func.functional_call(disc, {word: e_g.detach() + delta}, (t(fed), m_))
        real = m_.double()
        bce = torch.nn.functional.binary_cross_entropy_with_logits(z, target, reduction="none")
        total = mlm + weight * (bce * real).sum() / real.sum()
        total.backward()
        norm = torch.nn.utils.get_total_norm([p.grad for p in params_t if p.grad is not None], 2.0)
        torch.nn.utils.clip_grads_with_norm_(params_t, optim.clip_norm * (float(norm) + 1e-6) / float(norm), norm)
        opt.step()
        total = float(total.detach())
        assert abs(loss - total) <= 1e-9 * abs(total), (step, loss, total)
        assert abs(gnorm - float(norm)) <= 1e-9 * float(norm), (step, gnorm, float(norm))
        ref_d = {k: v.detach() for k, v in disc.state_dict().items()}
        ref_d[word] = e_g.detach() + delta.detach()
        for mine, ref in ((g_sd, gen.state_dict()), (d_sd, ref_d)):
            for k, a in mine.items():
                want = ref[k].detach().numpy()
                rel = np.abs(np.asarray(a, np.float64) - want).max() / max(np.abs(want).max(), 1e-30)
                assert rel <= 1e-8, (step, k, rel)
        replaced += int(target.sum())
    assert replaced > 0 and ours[0][2] > optim.clip_norm  # both classes seen, clipping exercised
    assert np.abs(ours[-1][3][1][word] - ours[-1][3][0][word]).max() > 1e-4  # E_delta moved off zero


@pytest.mark.parametrize("sharing", ["tied", "none"])
def test_deberta_tied_and_none_sharing_route_the_generator_gradient(sharing):
    """On the DeBERTa pair: under `tied` the generator holds no word table and its MLM loss reaches the
    discriminator's; under `none` it has its own and the discriminator's gets nothing from the MLM loss."""
    import jax
    import jax.numpy as jnp
    from flax import traverse_util
    from jaxbert.train.rtd_export import build_pair
    r = recipe_lib.from_dict(_recipe(rtd={"sharing": sharing}))
    model = build_pair(r, r.model_config(64))
    ids = jnp.asarray(np.random.RandomState(4).randint(4, 64, (2, 10)), jnp.int32)
    unbox = lambda t: jax.tree_util.tree_map(lambda x: x.unbox() if hasattr(x, "unbox") else x, t,  # noqa: E731
                                             is_leaf=lambda x: hasattr(x, "unbox"))
    params = unbox(model.init_boxed(jax.random.PRNGKey(0), ids, jnp.zeros_like(ids))["params"])
    word = ("deberta", "embeddings", "word_embeddings", "embedding")
    assert (word in traverse_util.flatten_dict(params["generator"])) == (sharing == "none")
    mb = {"input_ids": ids, "token_type_ids": jnp.zeros_like(ids), "attention_mask": jnp.ones_like(ids),
          "masked_positions": jnp.array([[1, 3], [2, 5]]), "masked_labels": ids[:, :2],
          "masked_weights": jnp.ones((2, 2))}

    def mlm(p):
        logits = model.apply({"params": p}, mb, jax.random.PRNGKey(1))["mlm_logits"]
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 0])
    grad = jax.jit(jax.grad(mlm))(params)
    g_disc = np.abs(np.asarray(traverse_util.flatten_dict(grad["discriminator"])[word])).max()
    assert (g_disc > 0) == (sharing == "tied")


def test_init_from_a_deberta_rtd_export_restores_both_models_and_a_backbone_alone_its_encoder(deberta_run, tmp_path):
    """model.init_from under rtd on DeBERTa-v3: its export (backbone, rtd_head.safetensors, generator/) gives the
    models the run ended with; the backbone alone (as the released v3 checkpoints are) gives its encoder, with
    the RTD head and the generator fresh (the log says so)."""
    import shutil
    from flax import traverse_util
    from tests.train.test_rtd_train import _flat_models, _joint_start
    from jaxbert.train.rtd_export import HEAD_FILE
    path, workdir = deberta_run
    recipe = recipe_lib.from_dict(yaml.safe_load(path.read_text()))
    ended = _flat_models(traverse_util.unflatten_dict(
        {tuple(k.split("/")): v for k, v in flat_params(workdir).items()}))
    _, warm, lines = _joint_start(recipe, workdir / "hf")
    for got, want in zip(_flat_models(warm), ended):
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-6 if "embeddings/" in k else 0, err_msg=k)
    backbone = tmp_path / "backbone"
    shutil.copytree(workdir / "hf", backbone, ignore=shutil.ignore_patterns("generator", HEAD_FILE))
    fresh, warm, lines = _joint_start(recipe, backbone)
    _, disc = _flat_models(warm)
    _, fresh_disc = _flat_models(fresh)
    assert all(np.array_equal(disc[k], ended[1][k]) for k in disc if k.startswith("deberta/"))
    head = [k for k in disc if not k.startswith("deberta/")]
    assert head and all(np.array_equal(disc[k], fresh_disc[k]) for k in head)
    assert any("freshly initialised" in line for line in lines) and any("holds no generator" in line for line in lines)
