"""PM602 / PM604: functions calling sites of two axis names where what a call places cannot name
its own axis's mesh, each kept faithful with a finding naming the line (the other functions
here call them in one line, next to other code or with a multi-line string, which the global
style takes as they are; they stay faithful only because their results go to other callers)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _pmap_mesh(size, axis_name):
    """The mesh pmap maps an axis of `size` over: the first `size` devices."""
    devices = jax.devices()[:size]
    return jax.make_mesh((size,), (axis_name,), devices=devices, axis_types=(AxisType.Auto,))


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

    return functools.wraps(function)(call)


def total(x):
    return jax.lax.psum(x, "i")


def largest(x):
    return jax.lax.pmax(jnp.max(x), "j")


def double(x):
    return x * 2


def log_value(x):
    print("logged", x)
    return 0


def log_count(n):
    print("devices", n)
    return n


def in_a_header():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(x)
    sign = 1.0
    if float(jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(x)[0]) > 0:
        sign = -1.0
    return {"t": np.asarray(t), "sign": np.float32(sign)}


def on_one_line():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(x); m = jax.jit(
        _per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")),
    )(x)
    return np.asarray(t), np.asarray(m)


def ordered_call():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    out = {
        "t": jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(x),
        "logged": log_value(3),
        "m": jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(x),
    }
    return out


def helper_in_statement():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    out = {
        "t": jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(x),
        "logged": log_count(n),
        "m": jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(x),
    }
    return out


def multi_line_string():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(x)
    m, note = jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(x), """the largest entry,
    on every device"""
    return np.asarray(t), np.asarray(m)


def nested_calls():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return np.asarray(jax.jit(
        _per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")),
    )(jax.jit(
        _per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")),
    )(x)))


p_double = jax.jit(
    _per_device_shard_map(double, "devices", in_specs=P("devices"), out_specs=P("devices")),
)


def unnamed_under_two_meshes():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(p_double(x))
    m = jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(p_double(x))
    return np.asarray(t), np.asarray(m)


def run():
    return {
        "in_a_header": in_a_header(),
        "on_one_line": on_one_line(),
        "ordered_call": ordered_call(),
        "helper_in_statement": helper_in_statement(),
        "multi_line_string": multi_line_string(),
        "nested_calls": nested_calls(),
        "unnamed_under_two_meshes": unnamed_under_two_meshes(),
    }
