"""PM602 / PM604: functions calling sites of two axis names where what a call places cannot name
its own axis's mesh, each kept faithful with a finding naming the line (the other functions
here call them in one line, next to other code or with a multi-line string, which the global
style takes as they are; they stay faithful only because their results go to other callers)."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _per_device_shard_map


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
    if float(
        jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(x)[0]
    ) > 0:
        sign = -1.0
    return {"t": np.asarray(t), "sign": np.float32(sign)}


def on_one_line():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(x); m = jax.jit(
        _per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j"))
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
        _per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j"))
    )(jax.jit(
        _per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i"))
    )(x)))


p_double = jax.jit(
    _per_device_shard_map(double, "devices", in_specs=P("devices"), out_specs=P("devices"))
)


def unnamed_under_two_meshes():
    n = jax.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    t = jax.jit(_per_device_shard_map(total, "i", in_specs=P("i"), out_specs=P("i")))(p_double(x))
    m = jax.jit(_per_device_shard_map(largest, "j", in_specs=P("j"), out_specs=P("j")))(
        p_double(x)
    )
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
