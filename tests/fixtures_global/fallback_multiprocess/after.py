"""PM607: a replicated stack whose value can differ between processes (it reads
jax.process_index()) cannot be placed once with P(): the site keeps pmap's contract (PM612)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from jax.experimental import multihost_utils


@functools.cache
def _pmap_mesh(size, axis_name):
    """The mesh pmap maps an axis of `size` over: this process's first `size` devices, or for a
    bigger size (several processes) every process's devices grouped by process, as pmap."""
    devices = jax.local_devices()
    if size > len(devices):
        devices = [d for p in range(jax.process_count()) for d in jax.local_devices(p)]
    return jax.make_mesh((size,), (axis_name,), devices=devices[:size],
                         axis_types=(AxisType.Auto,))


@functools.lru_cache(maxsize=256)
def _per_device_shard_map(function, axis_name, in_specs, out_specs, static_argnums=()):
    """`function` with pmap's calling contract, for jax.jit: shard_map over the first n devices,
    n the leading axis of the mapped arguments (jit traces once per n, as pmap compiled once
    per size). `function` sees one device's row of each mapped argument (keyword arguments are
    mapped too), and its results get the device axis back unless out_specs is P(). Cached, so
    a site built again (in a function, a loop) reuses jit's compiled program, as pmap did."""
    squeeze = lambda tree: jax.tree.map(lambda x: jax.lax.squeeze(x, (0,)), tree)

    def call(*args, **kwargs):
        static = {i: args[i] for i in static_argnums}
        mapped = tuple(a for i, a in enumerate(args) if i not in static)
        specs = in_specs if isinstance(in_specs, tuple) else (in_specs,) * len(mapped)

        def one_device(mapped, kwargs):
            rows = iter(a if s == P() else squeeze(a) for a, s in zip(mapped, specs))
            every = [static[i] if i in static else next(rows) for i in range(len(args))]
            out = function(*every, **squeeze(kwargs))
            return out if out_specs == P() else jax.tree.map(
                lambda x: jax.lax.expand_dims(x, (0,)), out)

        leaves = jax.tree.leaves(([a for a, s in zip(mapped, specs) if s != P()], kwargs))
        mesh = _pmap_mesh(leaves[0].shape[0], axis_name)
        return jax.shard_map(one_device, mesh=mesh, in_specs=(specs, P(axis_name)),
                             out_specs=out_specs, check_vma=False)(mapped, kwargs)

    call.pmap_contract = (axis_name, in_specs, out_specs, static_argnums)
    return functools.wraps(function)(call)


def _across_processes(per_device, **jit_options):
    """jax.jit(per_device), called as pmap is with several processes (jax.distributed): each
    process passes its host-local rows and gets its own rows back, and the program runs over
    every process's devices. With one process, or under another trace, the jitted function."""
    program = jax.jit(per_device, **jit_options)
    axis_name, in_specs, out_specs, static_argnums = per_device.pmap_contract

    def call(*args, **kwargs):
        leaves = jax.tree.leaves((args, kwargs))
        if jax.process_count() == 1 or any(isinstance(x, jax.core.Tracer) for x in leaves):
            return program(*args, **kwargs)
        mapped = [i for i in range(len(args)) if i not in static_argnums]
        specs = in_specs if isinstance(in_specs, tuple) else (in_specs,) * len(mapped)
        rows = jax.tree.leaves(([args[i] for i, s in zip(mapped, specs) if s != P()], kwargs))
        mesh = _pmap_mesh(rows[0].shape[0] * jax.process_count(), axis_name)

        def to_global(tree, spec):
            tree = jax.tree.map(lambda x: x if isinstance(x, jax.Array)
                                else jax.numpy.asarray(x), tree)
            return multihost_utils.host_local_array_to_global_array(tree, mesh, spec)

        args = [to_global(a, specs[mapped.index(i)]) if i in mapped else a
                for i, a in enumerate(args)]
        out = program(*args, **to_global(kwargs, P(axis_name)))
        return multihost_utils.global_array_to_host_local_array(out, mesh, out_specs)

    def lower(*args, **kwargs):
        if jax.process_count() > 1:
            raise NotImplementedError(
                "AOT lowering of a migrated pmap with several processes: lower the jitted "
                "program on global arrays (multihost_utils.host_local_array_to_global_array)")
        return program.lower(*args, **kwargs)

    call.lower = lower
    return functools.wraps(per_device)(call)


@functools.partial(_across_processes, donate_argnums=(0,))
@functools.partial(
    _per_device_shard_map, axis_name="batch", in_specs=P("batch"), out_specs=P("batch")
)
def train_step(params, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grads = jax.lax.pmean(grads, "batch")
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return new_params, jax.lax.pmean(loss, "batch")


def run():
    n = jax.local_device_count()
    offset = float(jax.process_index())
    params = {"w": jnp.stack([jnp.ones(3) + offset] * n), "b": jnp.stack([jnp.zeros(())] * n)}
    x = np.random.RandomState(0).normal(size=(n, 2, 3)).astype(np.float32)
    params, loss = train_step(params, x, x.sum(axis=-1))
    return {"loss": np.asarray(loss)}
