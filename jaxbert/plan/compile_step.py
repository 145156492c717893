"""Compile the real train step ahead of time for devices that need not be here.

``target_devices("v4:2x2x1")`` returns the abstract devices of a TPU topology
(libtpu compiles for them on any machine; nothing is allocated or run);
``"local"`` returns this process's devices. ``compile_train_step`` lowers the
step exactly as the training loop jits it (MeshRunner shardings, donated
state) from abstract arguments and reads XLA's per-chip figures:
``memory_analysis()`` (arguments, outputs, temporaries) and ``cost_analysis()``
(FLOPs, bytes accessed), and bounds the step's time from its optimized HLO
(``jaxbert.plan.roofline``) where the device's peak and bandwidths are known.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import time

import jax
from jax.experimental import topologies
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from jaxbert.devices import device_hbm_bytes, device_roofline
from jaxbert.errors import InputError, install_hint
from jaxbert.fs import as_path, atomic_write_text
from jaxbert.model.classes import build_model
from jaxbert.engine.optim import make_optimizer
from jaxbert.engine.parallel import MeshRunner
from jaxbert.engine.step import make_train_step
from jaxbert.train import mlm, rtd_loop
from jaxbert.train.recipe import Recipe
from jaxbert.plan.hlo_module import HloModule, kernel_flops
from jaxbert.plan.roofline import Bound, step_bound

TPU_EXTRA = install_hint("tpu") + " (in a clone of jaxbert)"



def libtpu_installed() -> bool:
    return importlib.util.find_spec("libtpu") is not None


def check_target(target: str) -> None:
    """Raises InputError naming the extra to install when `target` needs libtpu and it is missing."""
    if target != "local" and not libtpu_installed():
        raise InputError(f"--target {target}: compiling for a TPU needs libtpu, which is not installed; "
                         f"install the tpu extra: {TPU_EXTRA} (jax[tpu]=={jax.__version__})")


def target_devices(target: str) -> list:
    """The devices to compile for: 'local' (this process's) or a TPU topology name such as v4:2x2x1."""
    check_target(target)
    if target == "local":
        return jax.devices()
    # Off a TPU VM libtpu looks for these and prints warnings; a compile-only client needs neither.
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    try:
        topo = topologies.get_topology_desc(topology_name=target, platform="tpu")
    except Exception as e:  # libtpu's own error types; the first line says what it did not like
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"--target {target!r}: not a TPU topology libtpu knows ({first}); "
                         "examples: v4:2x2x1 (v4-8), v5e:2x2, v5e:4x4") from None
    return list(topo.devices)


@dataclasses.dataclass
class StepCost:
    """XLA's figures for one compiled step, per chip (bytes, FLOPs, seconds)."""
    per_device_batch: int
    hbm: int  # arguments + outputs - aliased (donated) + temporaries
    arguments: int
    outputs: int
    aliased: int
    temporaries: int
    flops: float | None  # a scanned step counts its scan body once: comparable only unscanned
    bytes_accessed: float | None
    lower_s: float
    compile_s: float
    # The compiler refused the step for want of memory (libtpu does for some targets, e.g. TPU v3, instead of
    # returning a memory analysis): hbm is then its requirement estimated from the message, and never fits.
    out_of_memory: bool = False
    host_temporaries: int = 0  # in the host's memory (remat_policy "offload"), not counted in hbm
    # The roofline lower bound on the step's time from its HLO (jaxbert.plan.roofline), per device;
    # None where the device's peak FLOP/s or memory bandwidth is unknown (a CPU) or the compile was refused.
    bound: Bound | None = None

    def fits(self, budget: int) -> bool:
        return not self.out_of_memory and self.hbm <= budget

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


_OOM = re.compile(r"required for HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)")
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def out_of_memory_cost(error: Exception, capacity: int | None, per_device_batch: int, lower_s: float,
                       compile_s: float) -> StepCost | None:
    """A StepCost for a compile refused with RESOURCE_EXHAUSTED (None for any other error).

    libtpu says "the total memory required for HLO temporaries (15.57G) exceeds available HBM (15.48G)",
    available being the device's memory less its arguments and reserved space: the step's whole
    requirement is then capacity - available + required (capacity: the device's memory)."""
    text = str(error)
    if "RESOURCE_EXHAUSTED" not in text:
        return None
    m = _OOM.search(text)
    required = available = None
    if m:
        required = float(m.group(1)) * _UNIT[m.group(2)]
        available = float(m.group(3)) * _UNIT[m.group(4)]
    cap = capacity or 0
    hbm = cap - available + required if (m and capacity) else cap + (required or 0)
    return StepCost(per_device_batch, int(hbm), 0, 0, 0, int(required or 0), None, None,
                    round(lower_s, 2), round(compile_s, 2), out_of_memory=True)


def bound_of(compiled, devices, hlo=None) -> Bound | None:
    """The step-time bound of a compiled step on devices[0] (None if its figures are unknown); hlo: its
    HLO text or parsed HloModule, where the caller has it already."""
    facts = device_roofline(devices[0], devices) if devices else None
    return None if facts is None else step_bound(compiled.as_text() if hlo is None else hlo, *facts)


def cost_of(compiled, per_device_batch: int, lower_s: float, compile_s: float, devices=None) -> StepCost:
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, (list, tuple)):  # older jax: one dict per program
        cost = cost[0] if cost else {}
    cost = dict(cost)
    text, hlo = compiled.as_text(), None
    if "tpu_custom_call" in text:  # XLA counts a Pallas kernel (splash attention) as -1 FLOPs: add what it runs
        hlo = HloModule(text)
        calls, kernel = kernel_flops(hlo)
        if calls and cost.get("flops") is not None:
            cost["flops"] = max(cost["flops"], 0.0) + kernel
    hbm = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
           + mem.temp_size_in_bytes)
    return StepCost(per_device_batch, int(hbm), int(mem.argument_size_in_bytes),
                    int(mem.output_size_in_bytes), int(mem.alias_size_in_bytes), int(mem.temp_size_in_bytes),
                    cost.get("flops"), cost.get("bytes accessed"), round(lower_s, 2), round(compile_s, 2),
                    host_temporaries=int(getattr(mem, "host_temp_size_in_bytes", 0) or 0),
                    bound=bound_of(compiled, devices, text if hlo is None else hlo))  # rendered once


def abstract_batch(recipe: Recipe, global_batch: int, sharding, split: str = "train") -> dict:
    """ShapeDtypeStructs of one batch [A, B_global, ...] of a split as the loop feeds it."""
    A, T, M = recipe.train.accum_steps, recipe.data.seq_len, recipe.data.masked_slots(split)
    shapes = {"input_ids": (T, jnp.int32), "token_type_ids": (T, jnp.int32), "attention_mask": (T, jnp.int32),
              "masked_positions": (M, jnp.int32), "masked_labels": (M, jnp.int32),
              "masked_weights": (M, jnp.float32)}
    batch = {k: jax.ShapeDtypeStruct((A, global_batch, n), dt, sharding=sharding) for k, (n, dt) in shapes.items()}
    if recipe.data.nsp:
        batch["next_sentence_labels"] = jax.ShapeDtypeStruct((A, global_batch), jnp.int32, sharding=sharding)
    if recipe.data.packing != "stream":  # rows of packed documents carry their segment ids
        batch["segment_ids"] = jax.ShapeDtypeStruct((A, global_batch, T), jnp.int32, sharding=sharding)
    return batch


def write_hlo(compiled, hlo_dir) -> None:
    """The optimized HLO of a compiled step as hlo_dir/train_step.hlo.txt (nothing when hlo_dir is None)."""
    if hlo_dir is not None:
        as_path(hlo_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(as_path(hlo_dir) / "train_step.hlo.txt", compiled.as_text())


def model_and_step(recipe: Recipe, cfg):
    """(the model the loop trains, its train step) as jaxbert.train.loop builds them: an MLM recipe's model and
    mlm.train_step; under train.objective rtd the generator and discriminator over one param tree
    (rtd_loop.build_pair) and the RTD objective's step at rtd.weight."""
    if recipe.train.objective == "rtd":
        spec, _ = rtd_loop.objective(recipe)
        return rtd_loop.build_pair(recipe, cfg), make_train_step(spec)
    return build_model(recipe.model.model_class, cfg, recipe.model.options()), mlm.train_step


def compile_train_step(recipe: Recipe, cfg, devices, per_device_batch: int, hlo_dir=None) -> StepCost:
    """Lowers and compiles the loop's train step for `devices` from shapes alone (an RTD recipe's: both models).

    recipe.train.per_device_batch_size is ignored: per_device_batch is compiled.
    hlo_dir: where to write the optimized HLO text (train_step.hlo.txt), for reading fusions.
    """
    model, train_step = model_and_step(recipe, cfg)
    runner = MeshRunner(recipe.parallel, devices=devices)
    tx, schedule = make_optimizer(recipe.optim, recipe.train.steps)
    dummy = jnp.zeros((1, recipe.data.seq_len), jnp.int32)
    runner.prepare(model, lambda: model.init_boxed(jax.random.PRNGKey(0), dummy, dummy)["params"], tx, schedule,
                   recipe.train.norm_metrics)
    batch = abstract_batch(recipe, per_device_batch * runner.num_devices,
                           NamedSharding(runner.mesh, P(None, "data")))
    rng = jax.ShapeDtypeStruct((2,), np.uint32, sharding=runner.replicated)
    t0 = time.perf_counter()
    lowered = runner.compile_train(train_step).lower(runner.abstract, batch, rng)
    return compiled_cost(lowered, devices, per_device_batch, time.perf_counter() - t0, hlo_dir)


def compiled_cost(lowered, devices, per_device_batch: int, lower_s: float, hlo_dir=None) -> StepCost:
    """Compiles a lowered step and reads its figures; a compile refused for want of memory is a figure too."""
    t1 = time.perf_counter()
    try:
        compiled = lowered.compile()
    except Exception as e:  # libtpu's own error types: only an out-of-memory refusal is a figure
        refused = out_of_memory_cost(e, device_hbm_bytes(devices[0], devices), per_device_batch, lower_s,
                                     time.perf_counter() - t1)
        if refused is None:
            raise
        return refused
    write_hlo(compiled, hlo_dir)
    return cost_of(compiled, per_device_batch, lower_s, time.perf_counter() - t1, devices)


def runnable_train_step(recipe: Recipe, cfg, devices, per_device_batch: int, seed: int = 0):
    """(compiled, run): the loop's train step compiled for `devices` (as compile_train_step lowers it), and
    run() that executes it once on a real state and a random batch of that shape and blocks until done."""
    model, train_step = model_and_step(recipe, cfg)
    runner = MeshRunner(recipe.parallel, devices=devices)
    tx, schedule = make_optimizer(recipe.optim, recipe.train.steps)
    dummy = jnp.zeros((1, recipe.data.seq_len), jnp.int32)
    runner.prepare(model, lambda: model.init_boxed(jax.random.PRNGKey(seed), dummy, dummy)["params"], tx, schedule,
                   recipe.train.norm_metrics)
    sharding = NamedSharding(runner.mesh, P(None, "data"))
    abstract = abstract_batch(recipe, per_device_batch * runner.num_devices, sharding)
    rng = np.random.default_rng(seed)
    A, B, T = abstract["input_ids"].shape
    M = abstract["masked_positions"].shape[-1]
    host = {"input_ids": rng.integers(5, cfg.vocab_size, (A, B, T)), "token_type_ids": np.zeros((A, B, T)),
            "attention_mask": np.ones((A, B, T)),
            "masked_positions": np.sort(np.stack([rng.choice(np.arange(1, T - 1), M, replace=False)
                                                  for _ in range(A * B)]), axis=1).reshape(A, B, M),
            "masked_labels": rng.integers(5, cfg.vocab_size, (A, B, M)), "masked_weights": np.ones((A, B, M)),
            "next_sentence_labels": rng.integers(0, 2, (A, B)), "segment_ids": np.ones((A, B, T))}
    batch = {k: jax.device_put(host[k].astype(v.dtype), sharding) for k, v in abstract.items()}
    key = jax.device_put(np.asarray(jax.random.PRNGKey(seed + 1), np.uint32), runner.replicated)
    compiled = runner.compile_train(train_step).lower(runner.abstract, abstract,
                                            jax.ShapeDtypeStruct((2,), np.uint32, sharding=runner.replicated)).compile()
    state = {"s": runner.create_state()}

    def run():
        state["s"], metrics = compiled(state["s"], batch, key)
        jax.block_until_ready(metrics)
    return compiled, run
