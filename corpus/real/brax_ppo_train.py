"""Modelled on brax's PPO training loop (brax/training/agents/ppo/train.py), with the
helpers it calls from brax/training/pmap.py, gradients.py and acme/running_statistics.py.

Source: github.com/google/brax at commit 241f9bc5bbd003f9cfc9ded7613388e2fe125af6
(2025-02-04, before the 2025-12 changes for the new `jax.pmap`). brax, optax and flax are
not used: the environment is a toy batched point-mass task in jax.numpy, the policy and
value functions are linear, the optimiser a hand-written Adam, and the loss a short
clipped-surrogate PPO loss with discounted returns. All code here is written anew.

pmap features kept:
- inside `train()`, nested defs close over the config, the environment, the optimiser and
  the policy factory: `minibatch_step` -> `sgd_step` -> `training_step` -> `training_epoch`
  (nested `lax.scan`s), and the name is rebound:
  `training_epoch = jax.pmap(training_epoch, axis_name=_PMAP_AXIS_NAME)`; a non-jittable
  wrapper (`nonlocal` wall-time counter, `_strip_weak_type` of inputs and outputs,
  `tree_map(jnp.mean)` of the metrics, `block_until_ready`) calls it;
- collectives through helpers called with the axis name: `lax.pmean` of grads in a
  `loss_and_pgrad`-style wrapper, `lax.psum` of the sample count in the observation
  normaliser update;
- keys: `fold_in(local_key, process_index)`, env keys `split(key_env, num_envs //
  process_count)` reshaped to (local_devices_to_use, -1, ...), per-epoch keys
  `split(epoch_key, local_devices_to_use)`, env keys advanced by a host `jax.vmap(lambda x,
  s: jax.random.split(x[0], s), in_axes=(0, None))` over the device axis;
- the env state lives per device (reset by a `jax.jit(jax.vmap(reset))` over the device
  axis, outside the pmap); the training state is placed by
  `jax.device_put_replicated(state, jax.local_devices()[:local_devices_to_use])`;
- reads: `_unpmap` (`tree_map(lambda x: x[0])`) of the params for a host evaluation, and
  `int(_unpmap(training_state.env_steps))`; `assert_is_replicated` runs a second pmap
  (`functools.partial(is_replicated, axis_name="i")`, `pmin == pmax` of a fingerprint) and
  reads `[0]`; `synchronize_hosts` holds a psum pmap that returns early in one process.

Scaled down: 4 envs per device, unrolls of 5 steps, 2 rollouts per training step, 2
minibatches, 2 SGD passes, 2 training steps per epoch, 2 epochs between 3 evaluations. The
per-epoch steps-per-second metric of the source is not returned (it reads the clock).

The original needs jax 0.4.38: `jax.device_put_replicated` is gone from jax 0.10 (the
migrated program is what runs there).
"""
import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_PMAP_AXIS_NAME = "i"


def _unpmap(v):
    return jax.tree_util.tree_map(lambda x: x[0], v)


def _strip_weak_type(tree):
    def strip(leaf):
        leaf = jnp.asarray(leaf)
        return leaf.astype(leaf.dtype)

    return jax.tree_util.tree_map(strip, tree)


# ---------------------------------------------------------------- host helpers (pmap.py)

def synchronize_hosts():
    if jax.process_count() == 1:
        return
    ones = jnp.ones([jax.local_device_count()])
    total = jax.device_get(jax.pmap(lambda v: jax.lax.psum(v, "i"), "i")(ones))
    assert total[0] == jax.device_count()


def _fingerprint(tree):
    sums = jax.tree_util.tree_map(jnp.sum, tree)
    return jax.tree_util.tree_reduce(lambda a, b: a + b, sums)


def is_replicated(tree, axis_name):
    fp = _fingerprint(tree)
    return jax.lax.pmin(fp, axis_name=axis_name) == jax.lax.pmax(fp, axis_name=axis_name)


def assert_is_replicated(tree, debug=None):
    check = functools.partial(is_replicated, axis_name="i")
    assert jax.pmap(check, axis_name="i")(tree)[0], debug


# ---------------------------------------------------------------- toy environment

class EnvState(NamedTuple):
    pos: Any
    vel: Any
    target: Any
    obs: Any
    reward: Any


class PointMass:
    """A batch of 1-D point masses pushed towards a random target."""

    observation_size = 3
    action_size = 1
    dt = 0.2

    def reset(self, keys):
        def one(key):
            kp, kt = jax.random.split(key)
            pos = jax.random.uniform(kp, (), minval=-1.0, maxval=1.0)
            target = jax.random.uniform(kt, (), minval=-1.0, maxval=1.0)
            vel = jnp.zeros(())
            return EnvState(pos, vel, target, jnp.stack([pos, vel, target]), jnp.zeros(()))

        return jax.vmap(one)(keys)

    def step(self, state, action):
        force = jnp.tanh(action[..., 0])
        vel = 0.9 * state.vel + self.dt * force
        pos = state.pos + self.dt * vel
        reward = -jnp.abs(pos - state.target) - 0.01 * force ** 2
        obs = jnp.stack([pos, vel, state.target], axis=-1)
        return EnvState(pos, vel, state.target, obs, reward)


# ---------------------------------------------------------------- running statistics

class NormState(NamedTuple):
    count: Any
    mean: Any
    summed_var: Any


def norm_init(size):
    return NormState(jnp.zeros(()), jnp.zeros((size,)), jnp.zeros((size,)))


def norm_update(state, batch, pmap_axis_name=None):
    batch = batch.reshape((-1, batch.shape[-1]))
    increment = jnp.asarray(batch.shape[0], jnp.float32)
    if pmap_axis_name is not None:
        increment = jax.lax.psum(increment, axis_name=pmap_axis_name)
    count = state.count + increment
    diff = batch - state.mean
    mean_shift = jnp.sum(diff, axis=0)
    if pmap_axis_name is not None:
        mean_shift = jax.lax.psum(mean_shift, axis_name=pmap_axis_name)
    mean = state.mean + mean_shift / count
    var_part = jnp.sum(diff * (batch - mean), axis=0)
    if pmap_axis_name is not None:
        var_part = jax.lax.psum(var_part, axis_name=pmap_axis_name)
    return NormState(count, mean, state.summed_var + var_part)


def normalize(obs, state):
    std = jnp.sqrt(state.summed_var / jnp.maximum(state.count, 1.0)) + 1e-3
    return (obs - state.mean) / std


# ---------------------------------------------------------------- networks and loss

def init_params(key_policy, key_value, obs_size, action_size):
    return {
        "policy": {"w": 0.1 * jax.random.normal(key_policy, (obs_size, action_size)),
                   "log_std": jnp.full((action_size,), -0.5)},
        "value": {"w": 0.1 * jax.random.normal(key_value, (obs_size,)),
                  "b": jnp.zeros(())},
    }


def make_policy_factory():
    def make_policy(norm_state, params, deterministic=False):
        def policy(obs, key):
            mean = normalize(obs, norm_state) @ params["policy"]["w"]
            if deterministic:
                return mean, jnp.zeros(mean.shape[:-1])
            std = jnp.exp(params["policy"]["log_std"])
            action = mean + std * jax.random.normal(key, mean.shape)
            logp = -0.5 * jnp.sum(((action - mean) / std) ** 2 + 2 * jnp.log(std), axis=-1)
            return action, logp

        return policy

    return make_policy


def ppo_loss(params, norm_state, data, discount=0.95, clip=0.2):
    obs = normalize(data["obs"], norm_state)
    mean = obs @ params["policy"]["w"]
    std = jnp.exp(params["policy"]["log_std"])
    logp = -0.5 * jnp.sum(((data["action"] - mean) / std) ** 2 + 2 * jnp.log(std), axis=-1)
    value = obs @ params["value"]["w"] + params["value"]["b"]

    def back(carry, r):
        carry = r + discount * carry
        return carry, carry

    _, returns = jax.lax.scan(back, jnp.zeros(data["reward"].shape[:1]),
                              data["reward"].T, reverse=True)
    returns = returns.T
    advantage = jax.lax.stop_gradient(returns - value)
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6)
    ratio = jnp.exp(logp - data["logp"])
    surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - clip, 1 + clip) * advantage)
    policy_loss = -jnp.mean(surrogate)
    value_loss = 0.5 * jnp.mean((returns - value) ** 2)
    entropy = jnp.sum(params["policy"]["log_std"])
    total = policy_loss + 0.5 * value_loss - 1e-3 * entropy
    return total, {"policy_loss": policy_loss, "value_loss": value_loss}


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"mu": zeros, "nu": zeros, "count": jnp.zeros((), jnp.int32)}

    def update(grads, state):
        count = state["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
        c1 = 1 - b1 ** count.astype(jnp.float32)
        c2 = 1 - b2 ** count.astype(jnp.float32)
        updates = jax.tree_util.tree_map(
            lambda m, v: -learning_rate * (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
        return updates, {"mu": mu, "nu": nu, "count": count}

    return init, update


def loss_and_pgrad(loss_fn, pmap_axis_name, has_aux=False):
    grad_fn = jax.value_and_grad(loss_fn, has_aux=has_aux)

    def with_pmean(*args, **kwargs):
        value, grads = grad_fn(*args, **kwargs)
        return value, jax.lax.pmean(grads, axis_name=pmap_axis_name)

    return grad_fn if pmap_axis_name is None else with_pmean


def gradient_update_fn(loss_fn, optimizer_update, pmap_axis_name, has_aux=False):
    value_and_pgrad = loss_and_pgrad(loss_fn, pmap_axis_name=pmap_axis_name, has_aux=has_aux)

    def apply(*args, optimizer_state):
        value, grads = value_and_pgrad(*args)
        updates, optimizer_state = optimizer_update(grads, optimizer_state)
        params = jax.tree_util.tree_map(lambda p, u: p + u, args[0], updates)
        return value, params, optimizer_state

    return apply


class TrainingState(NamedTuple):
    optimizer_state: Any
    params: Any
    normalizer_params: Any
    env_steps: Any


# ---------------------------------------------------------------- training

def train(
    num_evals=3,
    envs_per_device=4,
    unroll_length=5,
    rollouts_per_step=2,
    num_minibatches=2,
    num_updates_per_batch=2,
    training_steps_per_epoch=2,
    learning_rate=3e-3,
    seed=0,
    max_devices_per_host=None,
    num_eval_envs=16,
):
    process_id = jax.process_index()
    process_count = jax.process_count()
    local_device_count = jax.local_device_count()
    local_devices_to_use = local_device_count
    if max_devices_per_host:
        local_devices_to_use = min(local_devices_to_use, max_devices_per_host)
    device_count = local_devices_to_use * process_count
    num_envs = envs_per_device * device_count
    env_step_per_training_step = rollouts_per_step * unroll_length * num_envs
    num_evals_after_init = max(num_evals - 1, 1)

    key = jax.random.PRNGKey(seed)
    global_key, local_key = jax.random.split(key)
    local_key = jax.random.fold_in(local_key, process_id)
    local_key, key_env, eval_key = jax.random.split(local_key, 3)
    key_policy, key_value = jax.random.split(global_key)

    env = PointMass()
    reset_fn = jax.jit(jax.vmap(env.reset))
    key_envs = jax.random.split(key_env, num_envs // process_count)
    key_envs = jnp.reshape(key_envs, (local_devices_to_use, -1) + key_envs.shape[1:])
    env_state = reset_fn(key_envs)

    make_policy = make_policy_factory()
    opt_init, opt_update = adam(learning_rate)
    gradient_update = gradient_update_fn(
        ppo_loss, opt_update, pmap_axis_name=_PMAP_AXIS_NAME, has_aux=True)

    def minibatch_step(carry, data, normalizer_params):
        optimizer_state, params, key = carry
        key, _ = jax.random.split(key)
        (_, metrics), params, optimizer_state = gradient_update(
            params, normalizer_params, data, optimizer_state=optimizer_state)
        return (optimizer_state, params, key), metrics

    def sgd_step(carry, unused_t, data, normalizer_params):
        optimizer_state, params, key = carry
        key, key_perm, key_grad = jax.random.split(key, 3)

        def to_minibatches(x):
            x = jax.random.permutation(key_perm, x)
            return jnp.reshape(x, (num_minibatches, -1) + x.shape[1:])

        shuffled = jax.tree_util.tree_map(to_minibatches, data)
        (optimizer_state, params, _), metrics = jax.lax.scan(
            functools.partial(minibatch_step, normalizer_params=normalizer_params),
            (optimizer_state, params, key_grad),
            shuffled,
            length=num_minibatches,
        )
        return (optimizer_state, params, key), metrics

    def training_step(carry, unused_t):
        training_state, state, key = carry
        key_sgd, key_unroll, new_key = jax.random.split(key, 3)
        policy = make_policy(training_state.normalizer_params, training_state.params)

        def unroll(carry, unused_t):
            current, current_key = carry
            current_key, next_key = jax.random.split(current_key)

            def one_step(s, k):
                action, logp = policy(s.obs, k)
                nxt = env.step(s, action)
                return nxt, {"obs": s.obs, "action": action, "logp": logp,
                             "reward": nxt.reward}

            step_keys = jax.random.split(current_key, unroll_length)
            current, data = jax.lax.scan(one_step, current, step_keys)
            return (current, next_key), data

        (state, _), data = jax.lax.scan(
            unroll, (state, key_unroll), (), length=rollouts_per_step)
        # (rollouts, time, envs, ...) -> (rollouts * envs, time, ...)
        data = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 1, 2), data)
        data = jax.tree_util.tree_map(lambda x: jnp.reshape(x, (-1,) + x.shape[2:]), data)

        normalizer_params = norm_update(
            training_state.normalizer_params, data["obs"], pmap_axis_name=_PMAP_AXIS_NAME)

        (optimizer_state, params, _), metrics = jax.lax.scan(
            functools.partial(sgd_step, data=data, normalizer_params=normalizer_params),
            (training_state.optimizer_state, training_state.params, key_sgd),
            (),
            length=num_updates_per_batch,
        )
        new_training_state = TrainingState(
            optimizer_state=optimizer_state,
            params=params,
            normalizer_params=normalizer_params,
            env_steps=training_state.env_steps + env_step_per_training_step,
        )
        return (new_training_state, state, new_key), metrics

    def training_epoch(training_state, state, key):
        (training_state, state, _), loss_metrics = jax.lax.scan(
            training_step, (training_state, state, key), (),
            length=training_steps_per_epoch)
        loss_metrics = jax.tree_util.tree_map(jnp.mean, loss_metrics)
        return training_state, state, loss_metrics

    training_epoch = jax.pmap(training_epoch, axis_name=_PMAP_AXIS_NAME)

    training_walltime = 0.0

    def training_epoch_with_timing(training_state, env_state, key):
        nonlocal training_walltime
        t = time.time()
        training_state, env_state = _strip_weak_type((training_state, env_state))
        result = training_epoch(training_state, env_state, key)
        training_state, env_state, metrics = _strip_weak_type(result)
        metrics = jax.tree_util.tree_map(jnp.mean, metrics)
        jax.tree_util.tree_map(lambda x: x.block_until_ready(), metrics)
        training_walltime += time.time() - t
        metrics = {f"training/{name}": value for name, value in metrics.items()}
        return training_state, env_state, metrics

    init = init_params(key_policy, key_value, env.observation_size, env.action_size)
    training_state = TrainingState(
        optimizer_state=opt_init(init),
        params=init,
        normalizer_params=norm_init(env.observation_size),
        env_steps=0,
    )
    training_state = jax.device_put_replicated(
        training_state, jax.local_devices()[:local_devices_to_use])

    eval_reset = jax.jit(env.reset)

    @jax.jit
    def evaluate(norm_state, params, key):
        policy = make_policy(norm_state, params, deterministic=True)
        start = eval_reset(jax.random.split(key, num_eval_envs))

        def one_step(s, unused):
            action, _ = policy(s.obs, None)
            nxt = env.step(s, action)
            return nxt, nxt.reward

        _, rewards = jax.lax.scan(one_step, start, (), length=3 * unroll_length)
        return jnp.mean(jnp.sum(rewards, axis=0))

    eval_rewards = []
    if process_id == 0 and num_evals > 1:
        norm_state, params = _unpmap((training_state.normalizer_params, training_state.params))
        eval_rewards.append(evaluate(norm_state, params, eval_key))

    training_metrics = {}
    current_step = 0
    steps_seen = []
    for _ in range(num_evals_after_init):
        epoch_key, local_key = jax.random.split(local_key)
        epoch_keys = jax.random.split(epoch_key, local_devices_to_use)
        training_state, env_state, training_metrics = training_epoch_with_timing(
            training_state, env_state, epoch_keys)
        current_step = int(_unpmap(training_state.env_steps))
        steps_seen.append(current_step)

        key_envs = jax.vmap(
            lambda x, s: jax.random.split(x[0], s), in_axes=(0, None)
        )(key_envs, key_envs.shape[1])
        env_state = reset_fn(key_envs)

        if process_id != 0:
            continue
        norm_state, params = _unpmap((training_state.normalizer_params, training_state.params))
        eval_rewards.append(evaluate(norm_state, params, eval_key))

    assert_is_replicated(training_state)
    final = _unpmap((training_state.normalizer_params, training_state.params))
    synchronize_hosts()
    return final, training_metrics, eval_rewards, steps_seen, env_state


def run():
    (norm_state, params), metrics, eval_rewards, steps_seen, env_state = train()
    out = {
        "eval_rewards": np.asarray(eval_rewards),
        "steps_seen": np.asarray(steps_seen),
        "policy_w": np.asarray(params["policy"]["w"]),
        "log_std": np.asarray(params["policy"]["log_std"]),
        "value_w": np.asarray(params["value"]["w"]),
        "norm_mean": np.asarray(norm_state.mean),
        "norm_count": np.asarray(norm_state.count),
        "env_pos": np.asarray(env_state.pos),
    }
    for name, value in metrics.items():
        out[name.replace("/", "_")] = np.asarray(value)
    return out
