"""The step jaxbert replaces: transformers 4.57's FlaxBertForMaskedLM trained as run_mlm_flax did.

Its example's update, restated for one mesh: the head produces logits at
every position, the loss is the one-hot cross-entropy over the labelled
(masked) positions divided by their count over the global batch, and AdamW
(weight decay off biases and LayerNorm scales, no clipping) applies the
gradient. ``gradient_checkpointing`` is the port's own remat switch. Compiled
from shapes alone, like jaxbert.plan.compile_step.compile_train_step, for the same
devices, so the two steps' XLA figures sit side by side.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxbert.errors import InputError
from jaxbert.plan.compile_step import StepCost, compiled_cost


def _module(cfg, dtype, gradient_checkpointing: bool):
    try:
        import transformers
        from transformers.models.bert.modeling_flax_bert import FlaxBertForMaskedLMModule
    except ImportError as e:
        raise InputError(f"the old port's step needs transformers<5 with Flax models: {e}") from None
    hf_cfg = transformers.BertConfig(**cfg.to_dict())
    return FlaxBertForMaskedLMModule(config=hf_cfg, dtype=dtype, gradient_checkpointing=gradient_checkpointing)


def _no_decay_on_bias_and_norm(params):
    def keep(path, _):
        names = [getattr(k, "key", str(k)) for k in path]
        return names[-1] != "bias" and not (names[-1] == "scale" and "LayerNorm" in names[-2])
    return jax.tree_util.tree_map_with_path(keep, params)


def compile_old_port_step(cfg, devices, per_device_batch: int, seq_len: int, dtype=jnp.bfloat16,
                          gradient_checkpointing: bool = False, hlo_dir=None) -> StepCost:
    """XLA's per-chip figures of the old port's data-parallel train step on `devices`."""
    module = _module(cfg, dtype, gradient_checkpointing)
    tx = optax.adamw(optax.linear_schedule(1e-4, 0.0, 10_000), b1=0.9, b2=0.999, eps=1e-6,
                     weight_decay=0.01, mask=_no_decay_on_bias_and_norm)
    mesh = Mesh(np.array(devices), ("data",))
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def init():
        ids = jnp.zeros((1, seq_len), jnp.int32)
        params = module.init(jax.random.PRNGKey(0), ids, ids, ids, ids, None)["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}

    def step(state, batch, rng):
        labels = batch["labels"]  # [B, T]: the token id at masked positions, 0 elsewhere
        B, T = labels.shape
        rng = jax.random.fold_in(rng, state["step"])

        def loss_fn(params):
            logits = module.apply({"params": params}, batch["input_ids"], batch["attention_mask"],
                                  batch["token_type_ids"], jnp.broadcast_to(jnp.arange(T), (B, T)), None,
                                  deterministic=False, rngs={"dropout": rng})[0]  # [B, T, V]
            weight = jnp.where(labels > 0, 1.0, 0.0)
            nll = optax.softmax_cross_entropy(logits, jax.nn.one_hot(labels, logits.shape[-1])) * weight
            return nll.sum() / weight.sum()

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new = {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
               "opt_state": opt_state}
        return new, {"loss": loss}

    abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                                      jax.eval_shape(init))
    shape = (per_device_batch * len(devices), seq_len)
    batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=rows)
             for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    rng = jax.ShapeDtypeStruct((2,), np.uint32, sharding=replicated)
    state_sharding = jax.tree_util.tree_map(lambda x: x.sharding, abstract)
    jitted = jax.jit(step, in_shardings=(state_sharding, rows, replicated),
                     out_shardings=(state_sharding, replicated), donate_argnums=0)
    t0 = time.perf_counter()
    lowered = jitted.lower(abstract, batch, rng)
    return compiled_cost(lowered, devices, per_device_batch, time.perf_counter() - t0, hlo_dir)
