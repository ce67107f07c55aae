# pmap-migrate-test: original needs legacy jax
"""A notebook-style script (the ViT colab's shape): parameters replicated in top-level code,
then handed to a def that calls the module-level pmap with them, before and after an update
written at the top level too. The def is read inside the top-level code that calls it."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

n = jax.local_device_count()


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


@jax.jit
def apply_repl(params, inputs):
    return jax.shard_map(
        lambda params, inputs: jnp.tanh(inputs @ params["w"]),
        mesh=_mesh("devices"),
        in_specs=(P(), P("devices")),
        out_specs=P("devices"),
        check_vma=False,
    )(params, inputs)


def get_score(params_repl):
    inputs = np.arange(n * 2 * 3, dtype=np.float32).reshape(n * 2, 3) / 10.0
    predicted = apply_repl(params_repl, inputs)
    return float(predicted.sum())


params_repl = jax.device_put({"w": jnp.ones((3, 4))}, NamedSharding(_mesh("devices"), P()))
score_before = get_score(params_repl)
params_repl = jax.tree_util.tree_map(lambda w: w * 0.5, params_repl)
score_after = get_score(params_repl)


def run():
    return {"before": np.asarray(score_before), "after": np.asarray(score_after)}
