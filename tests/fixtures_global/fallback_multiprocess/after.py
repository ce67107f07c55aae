"""PM607: a replicated stack whose value can differ between processes (it reads
jax.process_index()) cannot be placed once with P(): the site keeps pmap's contract (PM612)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
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
    every process's devices; `.lower(...).compile()` too. With one process, or under another
    trace, the jitted function itself."""
    program = jax.jit(per_device, **jit_options)
    axis_name, in_specs, out_specs, static_argnums = per_device.pmap_contract

    def one_process(args, kwargs):
        if jax.process_count() == 1:
            return True
        return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))

    def made_global(args, kwargs):
        """The mesh of every process's devices, and the arguments as global arrays on it
        (as shapes, where lowering is given shapes)."""
        mapped = [i for i in range(len(args)) if i not in static_argnums]
        specs = in_specs if isinstance(in_specs, tuple) else (in_specs,) * len(mapped)
        rows = jax.tree.leaves(([args[i] for i, s in zip(mapped, specs) if s != P()], kwargs))
        mesh = _pmap_mesh(rows[0].shape[0] * jax.process_count(), axis_name)

        def to_global(tree, spec):
            def leaf(x):
                if isinstance(x, jax.ShapeDtypeStruct):
                    size = x.shape[:1] if spec == P() else (x.shape[0] * jax.process_count(),)
                    return jax.ShapeDtypeStruct(size + x.shape[1:], x.dtype,
                                                sharding=NamedSharding(mesh, spec))
                return x if isinstance(x, jax.Array) else jax.numpy.asarray(x)

            tree = jax.tree.map(leaf, tree)
            if any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(tree)):
                return tree
            return multihost_utils.host_local_array_to_global_array(tree, mesh, spec)

        args = [to_global(a, specs[mapped.index(i)]) if i in mapped else a
                for i, a in enumerate(args)]
        return mesh, args, to_global(kwargs, P(axis_name))

    def host_local(run):
        """`run` (the program, or one compiled from it) called with host-local rows."""
        def call(*args, **kwargs):
            mesh, args, kwargs = made_global(args, kwargs)
            out = run(*args, **kwargs)
            return multihost_utils.global_array_to_host_local_array(out, mesh, out_specs)

        return call

    def call(*args, **kwargs):
        if one_process(args, kwargs):
            return program(*args, **kwargs)
        return host_local(program)(*args, **kwargs)

    def lower(*args, **kwargs):
        if one_process(args, kwargs):
            return program.lower(*args, **kwargs)
        _, args, kwargs = made_global(args, kwargs)
        return _HostLocal(program.lower(*args, **kwargs), host_local)

    call.lower = lower
    return functools.wraps(per_device)(call)


class _HostLocal:
    """A lowered or compiled program whose compiled form takes and returns host-local rows, as
    pmap's did; its other attributes (as_text, cost_analysis, ...) are the program's."""

    def __init__(self, stage, host_local):
        self.stage, self.host_local = stage, host_local

    def compile(self, *args, **kwargs):
        return _HostLocal(self.stage.compile(*args, **kwargs), self.host_local)

    def __call__(self, *args, **kwargs):
        return self.host_local(self.stage)(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.stage, name)


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
