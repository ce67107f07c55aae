"""flax's wmt and lm1b: `functools.partial(train_step, label_smoothing=config.label_smoothing)`
read from an attribute, for a step called with keywords, and one with a static argument. Both
become jitted defs, which read their names at each trace; pmap's partial read the attribute
once, where it was built. The migration binds it to a name there: the change to `config`
after the steps are built must not reach them."""
# pmap-migrate-test: original needs legacy jax
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
    """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
    (never at import)."""
    return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def train_step(w, x, label_smoothing=0.0, dropout_rng=None):
    dropout_rng = jax.tree.map(lambda y: jnp.squeeze(y, 0), dropout_rng)
    keep = jax.random.bernoulli(dropout_rng, 0.75, x.shape)
    grad = jax.lax.pmean(jnp.mean(keep * x, axis=0), "batch")
    return w - 0.1 * grad + label_smoothing


def eval_step(w, x, squared, scale=1.0):
    error = x @ w
    error = error ** 2 if squared else jnp.abs(error)
    return jax.lax.psum(jnp.sum(error) * scale, "batch")


def run():
    mesh = _mesh("batch")
    n = jax.local_device_count()
    config = types.SimpleNamespace(label_smoothing=0.25, scale=2.0)
    w = jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))
    label_smoothing = config.label_smoothing

    @jax.jit
    def p_train_step(w, x, dropout_rng):
        return jax.shard_map(
            lambda w, x, dropout_rng: train_step(
                w, x, label_smoothing=label_smoothing, dropout_rng=dropout_rng
            ),
            mesh=_mesh("batch"),
            in_specs=(P(), P("batch"), P("batch")),
            out_specs=P(),
            check_vma=False,
        )(w, x, dropout_rng)

    scale = config.scale

    @functools.partial(jax.jit, static_argnums=2)
    def p_eval_step(w, x, squared):
        return jax.shard_map(
            lambda w, x: eval_step(w, x, squared, scale=scale),
            mesh=_mesh("batch"),
            in_specs=(P(), P("batch")),
            out_specs=P(),
            check_vma=False,
        )(w, x)

    config.label_smoothing, config.scale = 100.0, 100.0  # read by neither step
    rngs = jax.random.split(jax.random.PRNGKey(0), n)
    x = np.linspace(-1.0, 1.0, n * 12, dtype=np.float32).reshape(n * 4, 3)
    errors = []
    for _ in range(2):
        w = p_train_step(w, x, dropout_rng=rngs)
        errors.append(p_eval_step(w, x, True))
        errors.append(p_eval_step(w, x, False))
    return {"w": np.asarray(w), "errors": np.asarray(errors)}
