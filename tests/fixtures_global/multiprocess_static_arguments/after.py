"""Multi-process: a step with static arguments (flax's predict step takes the EOS id and the
decode length as `static_broadcasted_argnums`). They stay plain values, jit's static
arguments; the mapped ones are each process's rows made global at the call."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def predict_step(inputs, params, eos_id, max_length):
    steps = jnp.arange(max_length, dtype=jnp.float32)
    scores = inputs[:, :1] * params + steps[None, :]
    return jax.tree.map(
        lambda y: jnp.expand_dims(y, 0), jnp.where(scores > eos_id, eos_id, scores)
    )


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    rng = np.random.RandomState(jax.process_index())
    params = jax.device_put(jnp.float32(0.5), NamedSharding(mesh, P()))

    @functools.partial(jax.jit, static_argnums=(2, 3))
    def p_pred_step(inputs, params, eos_id, max_length):
        return jax.shard_map(
            lambda inputs, params: predict_step(inputs, params, eos_id, max_length),
            mesh=_mesh("batch"),
            in_specs=(P("batch"), P()),
            out_specs=P("batch"),
            check_vma=False,
        )(inputs, params)

    predictions = []
    for max_length in (3, 5):
        inputs = rng.normal(size=(n * 2, 4)).astype(np.float32)
        predicted = multihost_utils.global_array_to_host_local_array(
            p_pred_step(
                jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), inputs),
                params,
                1.0,
                max_length,
            ),
            mesh,
            P("batch"),
        )
        predictions.append(np.asarray(predicted).reshape(-1))
    return {"predictions": np.concatenate(predictions)}
