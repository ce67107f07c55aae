"""functools.partial sites whose arguments are calls (`metrics_fn=make_metrics("train")`,
scenic's trainer) and that bind keyword-only parameters (`def step(w, x, *, scale)`): the
partial evaluates them once, where it is built, and so does the global site, in place, or
bound to a name there where it becomes a jitted def (static arguments); a partial binding
every keyword-only parameter leaves a function of positional parameters, which pmap maps."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

BUILT = []


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def make_metrics(split):
    BUILT.append(split)  # counts how often the partial's argument is evaluated
    return lambda w: {split: jnp.sum(w)}


def step(w, x, *, scale, metrics_fn):
    g = jax.lax.pmean(jnp.mean(x, axis=0), "i")
    w = w - scale * g
    return w, metrics_fn(w)


def shifted(w, shift, *, scale):
    return w * scale + shift


def run():
    mesh = _mesh("i")
    n = jax.local_device_count()
    p_step = jax.jit(jax.shard_map(
        functools.partial(step, scale=len("abc") * 0.1, metrics_fn=make_metrics("train")),
        mesh=_mesh("i"), in_specs=(P(), P("i")), out_specs=(P(), P()), check_vma=False,
    ))
    scale = float(len(BUILT))

    @functools.partial(jax.jit, static_argnums=1)
    def p_shift(w, shift):
        return jax.shard_map(
            lambda w: shifted(w, shift, scale=scale),
            mesh=_mesh("i"),
            in_specs=(P(),),
            out_specs=P(),
            check_vma=False,
        )(w)

    w = jax.device_put(jnp.ones((3,)), NamedSharding(mesh, P()))
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(n * 2, 3)
    for _ in range(3):
        w, metrics = p_step(w, x)
        w = p_shift(w, 0.5)
    return {"w": np.asarray(w), "train": np.asarray(metrics["train"]),
            "built": np.asarray(len(BUILT))}
