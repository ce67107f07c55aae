"""A brax-PPO-style multi-process training loop (brax/training/agents/ppo/train.py shape).

Every process runs this same program. It reads `jax.process_index()` and sizes its batch by
`jax.local_device_count()`; the global device count is local x `jax.process_count()`. The
RNG is made per process with `fold_in(key, process_id)` and split per local device. A pmapped
epoch `pmean`s gradients over every device of every process. Hosts synchronise with the
pmapped psum barrier brax calls `synchronize_hosts`, and only process 0 logs metrics (read
with `x[0]` from the first local device, as brax's `_unpmap`). `run()` works with one process
too (then process_id is 0 and the barrier waits for nobody).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

_PMAP_AXIS_NAME = "i"
LEARNING_RATE = 0.05


def synchronize_hosts():
    # Make sure all processes stay up until the end of main.
    x = jnp.ones([jax.local_device_count()])
    jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(x).block_until_ready()


def _unpmap(v):
    return jax.tree_util.tree_map(lambda x: x[0], v)


def policy_loss(params, observations, key):
    noise = jax.random.normal(key, observations.shape[:1]) * 0.01
    logits = observations @ params["w"] + params["b"] + noise
    return jnp.mean((logits - 1.0) ** 2)


def sgd_step(params, observations, key):
    key, loss_key = jax.random.split(key)
    loss, grads = jax.value_and_grad(policy_loss)(params, observations, loss_key)
    grads = jax.lax.pmean(grads, axis_name=_PMAP_AXIS_NAME)
    loss = jax.lax.pmean(loss, axis_name=_PMAP_AXIS_NAME)
    params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return params, {"loss": loss, "param_norm": jnp.sqrt(jnp.sum(params["w"] ** 2))}, key


def run():
    process_id = jax.process_index()
    local_devices_to_use = jax.local_device_count()
    device_count = local_devices_to_use * jax.process_count()

    key = jax.random.PRNGKey(0)
    global_key, local_key = jax.random.split(key)
    del global_key
    local_key = jax.random.fold_in(local_key, process_id)
    device_keys = jax.random.split(local_key, local_devices_to_use)

    params = {"w": np.zeros((4,), np.float32), "b": np.zeros((), np.float32)}
    params = jax.tree_util.tree_map(
        lambda x: np.broadcast_to(x, (local_devices_to_use,) + x.shape), params)
    training_epoch = jax.pmap(sgd_step, axis_name=_PMAP_AXIS_NAME, donate_argnums=(0,))

    rng = np.random.RandomState(100 + process_id)
    logged, donated = [], []
    for _ in range(3):
        observations = rng.normal(size=(local_devices_to_use, 6, 4)).astype(np.float32)
        previous = params
        params, metrics, device_keys = training_epoch(params, observations, device_keys)
        donated.append(isinstance(previous["w"], jax.Array) and previous["w"].is_deleted())
        if process_id == 0:
            logged.append(float(_unpmap(metrics)["loss"]))

    synchronize_hosts()
    return {
        "logged_losses": np.asarray(logged, np.float32),
        "params": jax.device_get(_unpmap(params)),
        "local_params": np.asarray(params["w"]),
        "device_keys": np.asarray(jax.random.key_data(device_keys)
                                  if hasattr(jax.random, "key_data") else device_keys),
        "donated": np.asarray(donated),
        "device_count": np.asarray(device_count),
    }
