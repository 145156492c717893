"""Devices, hosts and shardings for training.

``initialize_distributed`` joins a multi-host run. ``make_runner`` returns one
of two runners with the same interface, chosen by ``parallel.strategy``:

* ``MeshRunner``: one 1-D mesh with axis ``data``; the step is jitted with
  explicit in/out shardings and the state donated. Params and optimizer state
  are replicated, or with ``parallel.fsdp`` sharded over ``data`` along the
  logical axes named in ``parallel.fsdp_axes`` (from the modules'
  nn.with_logical_partitioning names, read with jax.eval_shape, so nothing is
  allocated before the shardings are known).
* ``PmapRunner``: the same step under jax.pmap with gradients lax.pmean-ed, as
  transformers' run_mlm_flax did.

Host batches arrive as NumPy dicts holding this process's share of the global
batch, [A, B_host, ...] for training and [B_host, ...] for evaluation.
"""

from __future__ import annotations

import contextlib
import functools
import os

import flax.linen as nn
import jax
import numpy as np
import optax
from flax import jax_utils
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxbert.model.options import BATCH, compiling_for
from jaxbert.engine.recipe import ParallelSection, RecipeError
from jaxbert.engine.step import TrainState

LOGICAL_AXES = ("vocab", "embed", "heads", "mlp", "layers")


def initialize_distributed(p: ParallelSection) -> None:
    """Joins a multi-host run before any other JAX call.

    TPU pods (and clusters JAX detects itself) need no settings; elsewhere the
    coordinator, process count and id come from the recipe (``--coordinator``
    etc.) or JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID.
    """
    env = os.environ
    address = p.coordinator_address or env.get("JAX_COORDINATOR_ADDRESS")
    count = p.num_processes if p.num_processes is not None else env.get("JAX_NUM_PROCESSES")
    pid = p.process_id if p.process_id is not None else env.get("JAX_PROCESS_ID")
    tpu_pod = "," in env.get("TPU_WORKER_HOSTNAMES", "")
    if address == "auto" or (address is None and tpu_pod):
        jax.distributed.initialize()  # cluster auto-detection (TPU pod, SLURM, ...)
        return
    if address is None:
        if count not in (None, 1, "1"):
            raise RecipeError("parallel.num_processes > 1 needs parallel.coordinator_address")
        return
    if count is None or pid is None:
        raise RecipeError("parallel.coordinator_address needs parallel.num_processes and parallel.process_id")
    # CPU devices of different processes talk through gloo (the CPU client's default has no
    # cross-process collectives); the setting only concerns the CPU backend.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(address, int(count), int(pid))


def make_runner(p: ParallelSection):
    return PmapRunner(p) if p.strategy == "pmap" else MeshRunner(p)


def param_specs(boxed_params, p: ParallelSection, mesh_size: int):
    """PartitionSpecs over mesh axis 'data' for a tree of boxed (abstract) params.

    A dim whose logical name is in fsdp_axes is sharded when FSDP is on and the
    dim divides by the mesh size; anything else is replicated.
    """
    rules = [(name, "data" if p.fsdp and name in p.fsdp_axes else None) for name in LOGICAL_AXES]
    logical = nn.get_partition_spec(boxed_params)

    def to_mesh(spec, leaf):
        value = leaf.value if isinstance(leaf, nn.meta.AxisMetadata) else leaf
        if not isinstance(spec, P):
            return P()
        mesh_spec = nn.logical_to_mesh_axes(tuple(spec), rules)
        dims = [axis if axis is None or value.shape[i] % mesh_size == 0 else None
                for i, axis in enumerate(mesh_spec)]
        # Shard only one dim per param: FSDP splits each tensor once over the data axis.
        seen, out = False, []
        for axis in dims:
            out.append(None if seen else axis)
            seen = seen or axis is not None
        return P(*out)

    is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
    return jax.tree_util.tree_map(to_mesh, logical, boxed_params,
                                  is_leaf=lambda x: isinstance(x, P) or x is None or is_box(x))


class MeshRunner:
    """Data parallel (and FSDP) over one mesh spanning every process's devices."""

    strategy = "mesh"

    def __init__(self, p: ParallelSection, devices=None):
        # devices: the training devices by default; jaxbert.plan.compile_step passes the
        # abstract devices of a TPU topology to compile for hardware it lacks.
        explicit = devices
        devices = jax.devices() if devices is None else list(devices)
        if p.num_devices is not None:
            if jax.process_count() > 1 and p.num_devices != len(devices):
                raise RecipeError("parallel.num_devices must cover every device in a multi-host run")
            if not 0 < p.num_devices <= len(devices):
                raise RecipeError(f"parallel.num_devices={p.num_devices} but {len(devices)} devices exist")
            devices = devices[:p.num_devices]
        self.p = p
        auto = (jax.sharding.AxisType.Auto,)  # GSPMD propagation
        # make_mesh orders real devices by their links; a 1-D mesh of abstract
        # topology devices (which it rejects) is taken in the topology's order.
        self.mesh = (jax.make_mesh((len(devices),), ("data",), devices=devices, axis_types=auto)
                     if explicit is None else jax.sharding.Mesh(np.asarray(devices), ("data",), axis_types=auto))
        self.devices, self.num_devices = devices, len(devices)
        self.local_devices = [d for d in devices if d.process_index == jax.process_index()]
        self.replicated = NamedSharding(self.mesh, P())
        self.state_sharding = None
        self._eval_params = None

    def prepare(self, model, init_params_fn, tx, schedule, norm_metrics: bool = True, eval_params=None) -> None:
        """Works out the state's shapes and shardings; allocates nothing.

        init_params_fn() -> boxed params (nn.LogicallyPartitioned leaves).
        norm_metrics: the step also logs update and param norms (train.norm_metrics).
        eval_params: state -> the params evaluation and export read (the optimizer section's, when it
        overrides OptimSection.eval_params); None: the state's params themselves.
        """
        abstract_boxed = jax.eval_shape(init_params_fn)
        specs = param_specs(abstract_boxed, self.p, self.num_devices)

        def create(params=None):
            params = nn.meta.unbox(init_params_fn()) if params is None else params
            return TrainState.create(model.apply, params, tx, schedule, norm_metrics)

        self._create = create
        self.state_sharding = self._state_sharding(jax.eval_shape(create), specs, tx)
        self.abstract = jax.tree_util.tree_map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            jax.eval_shape(create), self.state_sharding)
        self._eval_params = None if eval_params is None else jax.jit(
            eval_params, in_shardings=(self.state_sharding,), out_shardings=self.state_sharding.params)

    def create_state(self, params=None) -> TrainState:
        """A fresh state, each array made directly with its sharding; `params` (placed by
        place_params) start it instead of the initialiser's, which then never runs."""
        if params is None:
            return jax.jit(self._create, out_shardings=self.state_sharding)()
        return jax.jit(self._create, in_shardings=(self.state_sharding.params,),
                       out_shardings=self.state_sharding)(params)

    def _state_sharding(self, abstract_state, specs, tx):
        # An optimizer's per-param state takes its param's sharding where it has the param's shape (Adam's
        # moments); state of another shape (Adafactor's factored row and column statistics) is replicated.
        opt_specs = optax.tree_map_params(
            tx, lambda leaf, spec, param: spec if leaf.shape == param.shape else P(), abstract_state.opt_state,
            specs, abstract_state.params, transform_non_params=lambda _: P(), is_leaf=lambda x: isinstance(x, P))
        named = lambda spec: NamedSharding(self.mesh, spec)
        is_spec = lambda x: isinstance(x, P)
        return abstract_state.replace(
            step=self.replicated,
            params=jax.tree_util.tree_map(named, specs, is_leaf=is_spec),
            opt_state=jax.tree_util.tree_map(named, opt_specs, is_leaf=is_spec))

    def place_params(self, params):
        """Host params (same tree as state.params) -> arrays with the state's param shardings."""
        return jax.tree_util.tree_map(
            lambda x, s: jax.make_array_from_callback(np.shape(x), s, lambda idx: np.asarray(x)[idx]),
            params, self.state_sharding.params)

    def _rows_per_device(self, fn):
        """fn traced with the activations' batch dim split over 'data' (the logical rule BATCH -> data,
        see jaxbert.model.options.constrain_batch; on one device there is nothing to split), and for
        this runner's devices (jaxbert.model.options.compiling_for)."""
        @functools.wraps(fn)
        def traced(*args, **kwargs):
            with contextlib.ExitStack() as stack:
                stack.enter_context(compiling_for(self.devices))
                if self.num_devices > 1:
                    stack.enter_context(nn.logical_axis_rules(((BATCH, "data"),)))
                    stack.enter_context(jax.sharding.use_abstract_mesh(self.mesh.abstract_mesh))
                return fn(*args, **kwargs)
        return traced

    def compile_train(self, step_fn):
        """step_fn(state, batch [A, B, ...], rng) -> (state, metrics) (jaxbert.engine.step.make_train_step)."""
        batch_sharding = NamedSharding(self.mesh, P(None, "data"))
        return jax.jit(self._rows_per_device(step_fn),
                       in_shardings=(self.state_sharding, batch_sharding, self.replicated),
                       out_shardings=(self.state_sharding, self.replicated), donate_argnums=0)

    def compile_eval(self, apply_fn, step_fn):
        """step_fn(params, batch [B, ...], apply_fn) -> replicated outputs (jaxbert.engine.step.make_eval_step)."""
        fn = self._rows_per_device(functools.partial(step_fn, apply_fn=apply_fn))
        return jax.jit(fn, in_shardings=(self.state_sharding.params, NamedSharding(self.mesh, P("data"))),
                       out_shardings=self.replicated)

    def shard_batch(self, host_batch: dict, eval: bool = False) -> dict:
        """This process's rows [A, B_host, ...] (or [B_host, ...]) -> global arrays."""
        spec = P("data") if eval else P(None, "data")
        sharding = NamedSharding(self.mesh, spec)
        axis = 0 if eval else 1
        n = jax.process_count()

        def put(x):
            shape = list(x.shape)
            shape[axis] *= n
            return jax.make_array_from_process_local_data(sharding, x, tuple(shape))
        return {k: put(v) for k, v in host_batch.items()}

    def to_saved(self, state: TrainState) -> TrainState:
        return state

    def from_saved(self, state: TrainState) -> TrainState:
        return state

    def params_of(self, state, saved: bool = False):
        """The params evaluation and export read (prepare's eval_params of the state; else its params), in
        the eval step's layout (saved: in the checkpoint's, the same here)."""
        return state.params if self._eval_params is None else self._eval_params(state)

    def metrics_to_host(self, metrics: dict) -> dict:
        """Device metric sums -> Python scalars."""
        return {k: np.asarray(v).item() for k, v in jax.device_get(metrics).items()}

    def describe(self) -> str:
        return _describe(self)


class PmapRunner:
    """jax.pmap over this process's devices; the state has a leading device axis."""

    strategy = "pmap"

    def __init__(self, p: ParallelSection):
        devices = jax.local_devices()
        if p.num_devices is not None:
            if jax.process_count() > 1:
                raise RecipeError("parallel.num_devices is for one process; leave it unset")
            devices = devices[:p.num_devices]
        self.p = p
        self.local_devices = self.devices = devices
        self.num_devices = len(devices) * jax.process_count()
        self._one = jax.sharding.SingleDeviceSharding(devices[0])
        self.replicated = self._one  # where saved scalars (step, rng) live
        self._eval_params = None

    def prepare(self, model, init_params_fn, tx, schedule, norm_metrics: bool = True, eval_params=None) -> None:
        """As MeshRunner.prepare; the state gets a leading device axis (eval_params runs on every device)."""
        def create(params=None):
            params = nn.meta.unbox(init_params_fn()) if params is None else params
            return TrainState.create(model.apply, params, tx, schedule, norm_metrics)
        self._create = create
        self.abstract = jax.tree_util.tree_map(  # the saved (unreplicated) layout
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self._one), jax.eval_shape(create))
        self._eval_params = None if eval_params is None else jax.pmap(eval_params, devices=self.local_devices)

    def create_state(self, params=None) -> TrainState:
        if params is None:
            return self.from_saved(jax.jit(self._create, out_shardings=self._one)())
        params = jax.tree_util.tree_map(lambda x: x[0], params)  # place_params' replicas -> one copy
        return self.from_saved(jax.jit(self._create, out_shardings=self._one)(params))

    def place_params(self, params):
        return jax_utils.replicate(jax.device_put(params, self._one), self.local_devices)

    def compile_train(self, step_fn):
        step = functools.partial(step_fn, axis_name="batch")
        return jax.pmap(step, axis_name="batch", in_axes=(0, 0, None), donate_argnums=0,
                        devices=self.local_devices)

    def compile_eval(self, apply_fn, step_fn):
        fn = functools.partial(step_fn, apply_fn=apply_fn, axis_name="batch")
        return jax.pmap(fn, axis_name="batch", devices=self.local_devices)

    def shard_batch(self, host_batch: dict, eval: bool = False) -> dict:
        """[A, B_host, ...] -> [devices, A, B_host / devices, ...] (device d gets a contiguous block)."""
        n = len(self.local_devices)

        def split(x):
            if eval:
                return x.reshape(n, x.shape[0] // n, *x.shape[1:])
            a, b = x.shape[:2]
            return np.swapaxes(x.reshape(a, n, b // n, *x.shape[2:]), 0, 1)
        return {k: split(np.asarray(v)) for k, v in host_batch.items()}

    def to_saved(self, state: TrainState) -> TrainState:
        return jax.tree_util.tree_map(lambda x: x[0], state)

    def from_saved(self, state: TrainState) -> TrainState:
        return jax_utils.replicate(state, self.local_devices)

    def params_of(self, state, saved: bool = False):
        """The params evaluation and export read (prepare's eval_params of the state; else its params):
        replicated [devices, ...] as the pmapped eval step takes them, or one copy (saved)."""
        params = state.params if self._eval_params is None else self._eval_params(state)
        return jax.tree_util.tree_map(lambda x: x[0], params) if saved else params

    def metrics_to_host(self, metrics: dict) -> dict:
        """Device metric sums -> Python scalars (one of pmap's replicated copies)."""
        return {k: np.asarray(v[0]).item() for k, v in jax.device_get(metrics).items()}

    def describe(self) -> str:
        return _describe(self)


def global_batch_size(recipe, runner) -> int:
    return recipe.train.per_device_batch_size * runner.num_devices * recipe.train.accum_steps


def host_batch_size(recipe, runner) -> int:
    """Sequences this process reads per optimizer step (all its micro-batches)."""
    return global_batch_size(recipe, runner) // jax.process_count()


def _describe(runner) -> str:
    kind = jax.devices()[0].platform
    return (f"{runner.strategy}: {runner.num_devices} {kind} device(s) over "
            f"{jax.process_count()} process(es)" + (" with FSDP" if runner.p.fsdp else ""))
