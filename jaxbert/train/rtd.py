"""Replaced-token detection (ELECTRA, DeBERTa-v3): a generator and a discriminator trained together.

The generator is a masked LM; at the masked positions of an MLM batch it predicts the original
tokens (its MLM loss) and a replacement is sampled from its distribution there (on its float32 logits,
sample_replacements, from the step's own sampling key, no gradient through the sample). The
discriminator reads the original ids with the sampled tokens at the masked positions and labels
every real (non-pad) token original or replaced; a sample equal to the original counts as original,
as ELECTRA's does. The objective is MLM + weight * RTD, each a mean over the global batch (the
masked tokens, the real tokens).

Embedding sharing (``sharing``) between the two models' word, position and token-type tables:
  tied  ELECTRA: one set of tables, the discriminator's; the generator reads them and both losses'
        gradients reach them (the generator's tree holds no tables of its own).
  gdes  DeBERTa-v3's gradient-disentangled sharing: the tables E_G are the generator's, updated by the
        MLM loss alone; the discriminator reads stop_gradient(E_G) + E_delta, its own tables holding
        E_delta (zeros at the start). The discriminator's exported tables are E_G + E_delta.
  none  two models, nothing shared.

The joint params are ``{"generator": ..., "discriminator": ...}``, one optimizer over both
(``RtdModel``); ``model_params`` gives each model's own params from them, ``export_params`` the two
models as they are saved. ``rtd_spec(weight)`` is the objective as the engine's step builder takes
it (jaxbert.engine.step.StepSpec); ``summarize`` the host side of its metrics.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import traverse_util

from jaxbert.engine.step import (CPU_FUSED_MIN_VOCAB, StepSpec, chunk_size, make_eval_step, make_train_step,
                                 nll_and_predicted)
from jaxbert.model.options import cpu_target
# the shared tables live below the workdir readers, which take a run's discriminator through export_params
from jaxbert.model.rtd_tables import SHARED_TABLES, SHARINGS, export_params, model_params, shared_tables  # noqa: F401

DEFAULT_WEIGHT = 50.0  # lambda of ELECTRA (Clark et al. 2020, section 3) and DeBERTa-v3

# The three streams of a micro-batch's key: the generator's dropout, the discriminator's, the sample.
_GEN, _DISC, _SAMPLE = 0, 1, 2


def table_pairs(gen_params, disc_params) -> list[tuple[tuple, tuple]]:
    """(generator path, discriminator path) of each table both models have; ValueError naming a table whose
    shapes differ (the vocabularies or embedding widths of the two models are not the same)."""
    gen, disc = shared_tables(gen_params), shared_tables(disc_params)
    flat_g, flat_d = traverse_util.flatten_dict(gen_params), traverse_util.flatten_dict(disc_params)
    pairs = []
    for suffix in sorted(set(gen) & set(disc)):
        g, d = jnp.shape(_value(flat_g[gen[suffix]])), jnp.shape(_value(flat_d[disc[suffix]]))
        if g != d:
            raise ValueError(f"the generator's {'/'.join(suffix)} is {g} and the discriminator's {d}: shared "
                             "embeddings need the same vocabulary and embedding width")
        pairs.append((gen[suffix], disc[suffix]))
    return pairs


def _value(leaf):
    return leaf.unbox() if hasattr(leaf, "unbox") else leaf


def joint_params(gen_params, disc_params, sharing: str) -> dict:
    """The joint tree trained, from the two models' fresh params (plain or boxed leaves): under `tied`
    the generator's tables are dropped (it reads the discriminator's); under `gdes` the discriminator's
    tables become E_delta, zeros."""
    if sharing not in SHARINGS:
        raise ValueError(f"sharing {sharing!r} is not one of {SHARINGS}")
    if sharing == "none":
        return {"generator": gen_params, "discriminator": disc_params}
    pairs = table_pairs(gen_params, disc_params)
    flat_g, flat_d = traverse_util.flatten_dict(gen_params), traverse_util.flatten_dict(disc_params)
    for g, d in pairs:
        if sharing == "tied":
            del flat_g[g]
        else:
            leaf = flat_d[d]
            zeros = jnp.zeros_like(_value(leaf))
            flat_d[d] = leaf.replace_boxed(zeros) if hasattr(leaf, "replace_boxed") else zeros
    return {"generator": traverse_util.unflatten_dict(flat_g), "discriminator": traverse_util.unflatten_dict(flat_d)}


def sample_replacements(key, logits: jax.Array) -> jax.Array:
    """Token ids drawn from softmax(logits) over the last axis, from float32 logits; no gradient.

    By Gumbel-max (argmax of logits + Gumbel noise), except where the step is compiled for a CPU and the
    vocabulary has engine.step.CPU_FUSED_MIN_VOCAB entries or more: there by the inverse of the distribution
    function (_sample_by_cdf), one uniform number per slot. XLA's CPU backend drew
    the Gumbel noise, a threefry number and two logarithms for every entry of the [B, M, V] logits, and took the
    argmax as a paired reduction: 85 ms of ELECTRA-Small's 509 ms RTD step at 8 x 128 (V = 30,522). The two
    draw from the same distribution, not the same tokens.
    """
    logits = jax.lax.stop_gradient(logits).astype(jnp.float32)
    if cpu_target() and logits.shape[-1] >= CPU_FUSED_MIN_VOCAB:
        return _sample_by_cdf(key, logits)
    return jnp.argmax(logits + jax.random.gumbel(key, logits.shape, jnp.float32), axis=-1).astype(jnp.int32)


def _sample_by_cdf(key, logits):
    """The first index whose running sum of exp(logits - max) exceeds u x their total, u uniform in [0, 1):
    found among chunks of the vocabulary first (engine.step's chunk size), then inside the chunk, so no running
    sum over the whole row is formed. A token of probability 0 (exp underflowing) is never drawn; where float32
    rounding puts u x total past the chosen chunk's last running sum, its last token is taken."""
    lead, V = logits.shape[:-1], logits.shape[-1]
    q = chunk_size(V)
    weights = jnp.exp(logits - jnp.max(logits, -1, keepdims=True)).reshape(*lead, V // q, q)
    sums = jnp.sum(weights, -1)  # [.., chunks]
    ends = jnp.cumsum(sums, -1)
    target = jax.random.uniform(key, lead, jnp.float32) * ends[..., -1]
    chunk = jnp.minimum(jnp.sum(ends <= target[..., None], -1), V // q - 1)
    start = jnp.take_along_axis(ends - sums, chunk[..., None], -1)[..., 0]
    inside = jnp.take_along_axis(weights, chunk[..., None, None], -2)[..., 0, :]  # [.., q]
    index = jnp.minimum(jnp.sum(start[..., None] + jnp.cumsum(inside, -1) <= target[..., None], -1), q - 1)
    return (chunk * q + index).astype(jnp.int32)


def replace_masked(input_ids, positions, originals, sampled, weights):
    """(discriminator ids [B, L], is-replaced labels [B, L] bool): input_ids with the sampled tokens at the
    masked positions (slots of weight 0 are padding and change nothing); a position is replaced where its
    sample differs from the original token (``originals``: the masked labels)."""
    L = input_ids.shape[-1]
    hit = (positions[..., None] == jnp.arange(L, dtype=positions.dtype)) & (weights[..., None] > 0)  # [B, M, L]
    at = jnp.any(hit, axis=1)
    value = jnp.sum(jnp.where(hit, sampled[..., None], 0), axis=1).astype(input_ids.dtype)
    original = jnp.sum(jnp.where(hit, originals[..., None], 0), axis=1)
    return jnp.where(at, value, input_ids), at & (value != original)


def rank_auc(scores, labels, weights):
    """(AUC, 1.0) over the tokens of weight > 0: the probability that a replaced token scores above an
    original one, ties counted half (exact, from sorted scores); (0, 0) where one class is absent."""
    scores = scores.reshape(-1).astype(jnp.float32)
    real = weights.reshape(-1) > 0
    pos, neg = real & labels.reshape(-1), real & ~labels.reshape(-1)
    sorted_neg = jnp.sort(jnp.where(neg, scores, jnp.inf))
    below = jnp.searchsorted(sorted_neg, scores, side="left")
    upto = jnp.searchsorted(sorted_neg, scores, side="right")
    wins = jnp.sum(jnp.where(pos, below + 0.5 * (upto - below), 0.0))
    n_pos, n_neg = jnp.sum(pos), jnp.sum(neg)
    both = (n_pos > 0) & (n_neg > 0)
    auc = jnp.where(both, wins / jnp.maximum(n_pos * n_neg, 1).astype(jnp.float32), 0.0)
    return auc, both.astype(jnp.float32)


def _token_logits(out) -> jax.Array:
    """The discriminator's per-token logit [B, L] (ElectraForPreTraining's; a [B, L, 1] head squeezed)."""
    logits = out.logits if hasattr(out, "logits") else out
    return logits[..., 0] if logits.ndim == 3 else logits


@dataclasses.dataclass(frozen=True, eq=False)
class RtdModel:
    """The generator and the discriminator as one model of the joint params (see the module docstring).

    generator: a masked-LM module (logits at masked_positions); discriminator: a module whose output's
    logits are one per token. ``apply`` is what the train state holds; ``init_boxed`` what the runner
    initialises."""
    generator: object
    discriminator: object
    sharing: str = "tied"

    def init_boxed(self, key, input_ids, token_type_ids):
        k_gen, k_disc = jax.random.split(key)
        positions = jnp.zeros((input_ids.shape[0], 1), jnp.int32)
        gen = self.generator.init_boxed(k_gen, input_ids, token_type_ids, masked_positions=positions)["params"]
        disc = self.discriminator.init_boxed(k_disc, input_ids, token_type_ids)["params"]
        return {"params": joint_params(gen, disc, self.sharing)}

    def apply(self, variables, mb: dict, rng, deterministic: bool = True) -> dict:
        """The generator's logits at the masked positions, the samples, and the discriminator's per-token
        logits on the replaced ids, for one micro-batch [B, ...]."""
        gen_p, disc_p = model_params(variables["params"], self.sharing)
        packed = {"segment_ids": mb["segment_ids"]} if "segment_ids" in mb else {}
        gen = self.generator.apply({"params": gen_p}, mb["input_ids"], mb["token_type_ids"],
                                   attention_mask=mb["attention_mask"], masked_positions=mb["masked_positions"],
                                   deterministic=deterministic, rngs={"dropout": jax.random.fold_in(rng, _GEN)},
                                   **packed)
        sampled = sample_replacements(jax.random.fold_in(rng, _SAMPLE), gen.logits)
        ids, replaced = replace_masked(mb["input_ids"], mb["masked_positions"], mb["masked_labels"], sampled,
                                       mb["masked_weights"])
        disc = self.discriminator.apply({"params": disc_p}, ids, mb["token_type_ids"],
                                        attention_mask=mb["attention_mask"], deterministic=deterministic,
                                        rngs={"dropout": jax.random.fold_in(rng, _DISC)}, **packed)
        return {"mlm_logits": gen.logits, "sampled": sampled, "disc_ids": ids, "replaced": replaced,
                "disc_logits": _token_logits(disc)}


def _forward(params, apply_fn, mb, rng, deterministic):
    return apply_fn({"params": params}, mb, rng, deterministic)


def _sums(out: dict, mb: dict) -> dict:
    """Weighted sums of one micro-batch: the generator's MLM loss and accuracy at the masked slots, the
    discriminator's BCE, accuracy and AUC over the real tokens, the replaced tokens."""
    logits = out["mlm_logits"]
    loss_dtype = jnp.promote_types(logits.dtype, jnp.float32)
    labels, w = mb["masked_labels"], mb["masked_weights"].astype(loss_dtype)
    nll, guess = nll_and_predicted(logits, labels)
    correct = (guess == labels).astype(loss_dtype)
    d_logits = out["disc_logits"].astype(jnp.promote_types(out["disc_logits"].dtype, jnp.float32))
    replaced, real = out["replaced"], mb["attention_mask"].astype(d_logits.dtype)
    bce = optax.sigmoid_binary_cross_entropy(d_logits, replaced.astype(d_logits.dtype))
    right = ((d_logits > 0) == replaced).astype(d_logits.dtype)
    auc, auc_count = rank_auc(d_logits, replaced, real)
    return {"mlm_loss_sum": jnp.sum(nll * w), "mlm_correct": jnp.sum(correct * w), "mlm_weight": jnp.sum(w),
            "rtd_loss_sum": jnp.sum(bce * real), "rtd_correct": jnp.sum(right * real), "rtd_weight": jnp.sum(real),
            "rtd_replaced": jnp.sum(replaced.astype(d_logits.dtype) * real),
            "rtd_auc_sum": auc, "rtd_auc_count": auc_count}


def _weights(batch: dict) -> dict:
    return {"mlm": batch["masked_weights"].astype(jnp.float32), "rtd": batch["attention_mask"].astype(jnp.float32)}


def rtd_spec(weight: float = DEFAULT_WEIGHT) -> StepSpec:
    """The RTD objective as a StepSpec: mean MLM loss over the global batch's masked tokens plus weight x the
    mean BCE over its real tokens."""
    def objective(m, dens, batch):
        return m["mlm_loss_sum"] / dens["mlm"] + weight * m["rtd_loss_sum"] / dens["rtd"]
    return StepSpec(name="rtd", forward=_forward, sums=_sums, weights=_weights, objective=objective,
                    loss_sum=lambda sums: sums["mlm_loss_sum"] + sums["rtd_loss_sum"])


def rtd_steps(weight: float = DEFAULT_WEIGHT):
    """(train_step, eval_step) of the RTD objective (jaxbert.engine.step's builders)."""
    spec = rtd_spec(weight)
    return make_train_step(spec), make_eval_step(spec)


def summarize(sums: dict, prefix: str = "", weight: float = DEFAULT_WEIGHT) -> dict:
    """Host side: metric sums -> figures. mlm_*: the generator's; rtd_*: the discriminator's;
    replaced_fraction: replaced tokens per masked token; loss = mlm_loss + weight x rtd_loss."""
    w = max(float(sums["mlm_weight"]), 1e-9)
    n = max(float(sums["rtd_weight"]), 1e-9)
    out = {prefix + "mlm_loss": float(sums["mlm_loss_sum"]) / w,
           prefix + "mlm_accuracy": float(sums["mlm_correct"]) / w,
           prefix + "rtd_loss": float(sums["rtd_loss_sum"]) / n,
           prefix + "rtd_accuracy": float(sums["rtd_correct"]) / n,
           prefix + "replaced_fraction": float(sums["rtd_replaced"]) / w}
    if float(sums.get("rtd_auc_count", 0.0)) > 0:
        out[prefix + "rtd_auc"] = float(sums["rtd_auc_sum"]) / float(sums["rtd_auc_count"])
    out[prefix + "loss"] = out[prefix + "mlm_loss"] + weight * out[prefix + "rtd_loss"]
    for key in ("grad_norm", "update_norm", "param_norm", "learning_rate"):
        if key in sums:
            out[prefix + key] = float(sums[key])
    return out
