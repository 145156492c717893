"""Objective parity: three steps of jaxbert's RTD train step (jaxbert.train.rtd) against a PyTorch reference written
here from transformers' ElectraForMaskedLM (generator) + ElectraForPreTraining (discriminator) and torch AdamW, in
float64, from the same weights, on the same replacements (jaxbert's samples are fed to torch): the loss within
1e-9 and every parameter within 1e-8 of its tensor's largest value, as `jaxbert parity --train-steps` judges.

The reference's sharing is written with torch's own means: `tied`, the generator's three embedding modules
replaced by the discriminator's (one Parameter each, both losses' gradients summed into it, the generator's
decoder re-tied to it); `gdes`, the discriminator called with its tables overridden by E_G.detach() + E_delta
(torch.func.functional_call), so the MLM loss alone reaches E_G and the RTD loss alone E_delta.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxbert.convert import params_to_state_dict  # noqa: E402
from jaxbert.engine.optim import make_optimizer  # noqa: E402
from jaxbert.engine.step import TrainState, make_train_step  # noqa: E402
from jaxbert.model.families import FAMILIES  # noqa: E402
from jaxbert.model.options import ModelOptions  # noqa: E402
from jaxbert.parity.compare import numerics  # noqa: E402
from jaxbert.parity.torch_reference import _no_decay, warmup_linear  # noqa: E402
from jaxbert.parity.trajectory import mlm_batches  # noqa: E402
from jaxbert.train import rtd  # noqa: E402
from jaxbert.train.recipe import OptimSection  # noqa: E402

WEIGHT, STEPS, TABLES = 50.0, 3, ("word_embeddings", "position_embeddings", "token_type_embeddings")
_NO_GRADIENT = ("attention.self.key.bias",)  # its true gradient is 0: both sides return rounding noise


def _configs():
    family = FAMILIES["electra"]
    cls = family.config_class
    common = dict(vocab_size=60, embedding_size=16, max_position_embeddings=24, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, pad_token_id=0)
    disc = cls(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, **common)
    gen = cls(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=24, **common)
    return family, gen, disc


def _inputs():
    rs = np.random.RandomState(0)
    ids = rs.randint(4, 60, (4, 20)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    mask[3, 11:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}


def _jax_run(sharing, optim, batches):
    """jaxbert: per step (the replaced ids its generator sampled, the loss, the gradient norm, the two models'
    state dicts after the update); and the initial state dicts."""
    family, gen_cfg, disc_cfg = _configs()
    opts = ModelOptions(dtype=jnp.float64, param_dtype=jnp.float64)
    model = rtd.RtdModel(family.build("ElectraForMaskedLM", gen_cfg, opts),
                         family.build("ElectraForPreTraining", disc_cfg, opts), sharing)
    ids = jnp.asarray(batches[0]["input_ids"][0])
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), jax.tree_util.tree_map(
        lambda x: x.unbox() if hasattr(x, "unbox") else x, model.init_boxed(jax.random.PRNGKey(3), ids, ids * 0)["params"],
        is_leaf=lambda x: hasattr(x, "unbox")))
    tx, schedule = make_optimizer(optim, STEPS)
    state = TrainState.create(model.apply, params, tx, schedule)
    step_fn = jax.jit(make_train_step(rtd.rtd_spec(WEIGHT)))
    rng = jax.random.PRNGKey(11)

    def dicts(p):
        gen, disc = rtd.export_params(jax.device_get(p), sharing)
        return (params_to_state_dict(gen, gen_cfg, "ElectraForMaskedLM"),
                params_to_state_dict(disc, disc_cfg, "ElectraForPreTraining"))
    start = dicts(state.params)
    sample = jax.jit(model.apply, static_argnums=3)
    rows = []
    for b in batches:
        jb = {k: jnp.asarray(v) for k, v in b.items() if k != "labels"}
        mb = jax.tree_util.tree_map(lambda x: x[0], jb)
        # the micro-batch key the step's forward draws from (jaxbert.engine.step: step, then micro-batch 0)
        key = jax.random.fold_in(jax.random.fold_in(rng, state.step), 0)
        out = sample({"params": state.params}, mb, key, False)
        state, m = step_fn(state, jb, rng)
        m = jax.device_get(m)
        loss = m["mlm_loss_sum"] / m["mlm_weight"] + WEIGHT * m["rtd_loss_sum"] / m["rtd_weight"]
        rows.append((np.asarray(out["disc_ids"]), float(loss), float(m["grad_norm"]), dicts(state.params)))
    return (gen_cfg, disc_cfg, model), start, rows


def _torch_run(sharing, optim, batches, built, start, replaced_ids):
    _, _, model = built
    gen_sd, disc_sd = start
    gen = _load(model.generator, gen_sd)
    disc = _load(model.discriminator, disc_sd)
    override = {}
    if sharing == "tied":
        for name in TABLES:
            setattr(gen.electra.embeddings, name, getattr(disc.electra.embeddings, name))
        gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
    elif sharing == "gdes":  # E_delta: the discriminator's tables as jaxbert exported them, less E_G
        for name in TABLES:
            e_g = getattr(gen.electra.embeddings, name).weight
            d = getattr(disc.electra.embeddings, name).weight
            override[name] = torch.nn.Parameter((d - e_g).detach().clone())
    named, seen = [], set()
    for prefix, module in (("generator.", gen), ("", disc)):
        for n, p in module.named_parameters():
            if id(p) in seen or (sharing == "gdes" and prefix == "" and n.startswith("electra.embeddings.") and
                                 n.split(".")[2] in TABLES):
                continue
            seen.add(id(p))
            named.append((prefix + n, p))
    named += [(f"electra.embeddings.{n}.delta", p) for n, p in override.items()]
    groups = [{"params": [p for n, p in named if not _no_decay(n)], "weight_decay": optim.weight_decay},
              {"params": [p for n, p in named if _no_decay(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=optim.learning_rate, betas=(optim.b1, optim.b2), eps=optim.eps,
                            weight_decay=optim.weight_decay, foreach=False)
    params = [p for _, p in named]
    rows = []
    for step, (b, disc_ids) in enumerate(zip(batches, replaced_ids)):
        lr = warmup_linear(step, optim.learning_rate, min(optim.warmup_steps, STEPS), STEPS, optim.end_lr_factor)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        t = lambda a: torch.from_numpy(np.array(a)).long()  # noqa: E731
        ids, types, mask = t(b["input_ids"][0]), t(b["token_type_ids"][0]), t(b["attention_mask"][0])
        labels = t(b["labels"])
        logits = gen(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
        mlm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                ignore_index=-100)
        original = torch.where(labels >= 0, labels, ids)  # the masked positions' original tokens
        fed = t(disc_ids)
        target = (fed != original).double()
        if sharing == "gdes":
            tables = {f"electra.embeddings.{n}.weight": getattr(gen.electra.embeddings, n).weight.detach() + d
                      for n, d in override.items()}
            z = torch.func.functional_call(disc, tables, (), {"input_ids": fed, "token_type_ids": types,
                                                               "attention_mask": mask}).logits
        else:
            z = disc(input_ids=fed, token_type_ids=types, attention_mask=mask).logits
        real = mask.double()
        bce = torch.nn.functional.binary_cross_entropy_with_logits(z, target, reduction="none")
        loss = mlm + WEIGHT * (bce * real).sum() / real.sum()
        loss.backward()
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], 2.0)
        if optim.clip_norm:
            n = float(norm)
            torch.nn.utils.clip_grads_with_norm_(params, optim.clip_norm * (n + 1e-6) / n, norm)
        opt.step()
        gen_now = {k: v.detach().clone() for k, v in gen.state_dict().items()}
        disc_now = {k: v.detach().clone() for k, v in disc.state_dict().items()}
        for n, d in override.items():
            disc_now[f"electra.embeddings.{n}.weight"] = getattr(gen.electra.embeddings, n).weight.detach() + d.detach()  # a new tensor
        rows.append((float(loss.detach()), float(norm), (gen_now, disc_now), target))
    return rows


def _load(module, state_dict):
    """transformers' class of a jaxbert module, float64, holding a state dict (as jaxbert.parity.compare.torch_model
    builds one, with eager attention)."""
    import transformers
    cfg = transformers.AutoConfig.for_model(**module.config.to_dict())
    cfg._attn_implementation = "eager"
    model = getattr(transformers, type(module).__name__)(cfg).to(torch.float64)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.array(v, np.float64))
                                                 for k, v in state_dict.items()}, strict=False)
    assert not unexpected and all(k.endswith("_ids") or "generator_lm_head.weight" in k for k in missing), \
        (missing, unexpected)
    return model.train()  # the dropout rates are 0


def _worst(ours: dict, theirs: dict) -> tuple:
    worst = (-1.0, "")
    for key, a in ours.items():
        if key.endswith(_NO_GRADIENT):
            continue
        t = theirs[key].numpy()
        rel = float(np.abs(np.asarray(a, np.float64) - t).max() / max(float(np.abs(t).max()), 1e-30))
        worst = max(worst, (rel, key))
    return worst


@pytest.mark.parametrize("sharing", ["tied", "gdes"])
def test_rtd_three_steps_match_transformers_electra_and_torch_adamw(sharing):
    optim = OptimSection(learning_rate=2e-3, warmup_steps=1, weight_decay=0.01, clip_norm=1.0)
    inputs = _inputs()
    batches = mlm_batches(inputs, 60, STEPS, seed=0, pad_id=0)
    with numerics("float64"):
        built, start, ours = _jax_run(sharing, optim, batches)
    theirs = _torch_run(sharing, optim, batches, built, start, [r[0] for r in ours])
    replaced = 0
    for step, ((_, loss, gnorm, (gen, disc)), (t_loss, t_norm, (t_gen, t_disc), target)) in enumerate(zip(ours,
                                                                                                          theirs)):
        assert abs(loss - t_loss) <= 1e-9 * abs(t_loss), (step, loss, t_loss)
        assert abs(gnorm - t_norm) <= 1e-9 * t_norm, (step, gnorm, t_norm)
        for mine, ref, what in ((gen, t_gen, "generator"), (disc, t_disc, "discriminator")):
            rel, key = _worst(mine, ref)
            assert rel <= 1e-8, (step, what, key, rel)
        replaced += int(target.sum())
    assert ours[0][2] > optim.clip_norm  # clipping is exercised
    assert replaced > 0  # the generator's samples replaced tokens: the discriminator had both classes
    assert len({r[1] for r in ours}) == STEPS
    if sharing == "gdes":  # E_delta moved off zero: the discriminator's tables differ from E_G after the steps
        gen, disc = ours[-1][3]
        key = "electra.embeddings.word_embeddings.weight"
        assert np.abs(np.asarray(disc[key]) - np.asarray(gen[key])).max() > 1e-4
