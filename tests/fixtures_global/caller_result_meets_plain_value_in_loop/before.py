"""The shape of diffusers' training loop: per epoch an inner loop of steps, then
`train_metric = unreplicate(train_metric)` after it. On the next epoch the inner loop joins the
step's replicated metrics with that plain value (had the loop run no step, `unreplicate` would
read the previous epoch's plain value), so the metrics cannot be one global value: that result
alone comes back in pmap's stacked layout (n equal rows, out_specs P(axis)) while the params stay
replicated (P()), and row 0 of a value the migration leaves as it is stays row 0. The module's
`replicate` binds a local name before returning its placement: still a new placement, so
donating the params cannot delete `frozen` (both made by one call, `init_params()`)."""
# pmap-migrate-test: original needs legacy jax
import jax
import jax.numpy as jnp
import numpy as np


def replicate(tree, devices=None):
    devices = devices or jax.local_devices()
    return jax.device_put_replicated(tree, devices)


def init_params():
    return jnp.zeros(3), jnp.ones(3)


def unreplicate(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def train_step(params, frozen, x, key):
    key, sub = jax.random.split(key)
    noise = 0.01 * jax.random.normal(sub, x.shape)
    grad = jax.lax.pmean(jnp.mean(x + noise, axis=0) * frozen - params, "batch")
    metrics = jax.lax.pmean({"loss": jnp.mean((x - params) ** 2)}, axis_name="batch")
    return params + 0.5 * grad, metrics, key


def run():
    n = jax.local_device_count()
    p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
    params, frozen = init_params()
    params = replicate(params)
    frozen = replicate(frozen)
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    rng = np.random.RandomState(0)
    losses = []
    for epoch in range(2):
        for _ in range(3):
            params, train_metric, keys = p_train_step(
                params, frozen, rng.normal(size=(n, 2, 3)).astype(np.float32), keys)
        train_metric = unreplicate(train_metric)
        losses.append(float(train_metric["loss"]))
    return {"w": np.asarray(unreplicate(params)), "losses": np.asarray(losses),
            "keys": np.asarray(keys)}
