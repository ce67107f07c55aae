"""Modelled on mava/systems/ppo/ff_ippo.py (instadeepai/Mava @ 01ece2b9403c), the Anakin
IPPO system: `get_learner_fn` returns `learner_fn`, which scans a
`jax.vmap(_update_step, in_axes=(0, None), axis_name="batch")` (rollout scan, GAE scan,
epoch / minibatch scans) and is pmapped in `learner_setup` as `jax.pmap(learn,
axis_name="device")`; the minibatch update `lax.pmean`s (grads, loss info) tuples first over
"batch" and then over "device"; `learner_setup` builds the (devices, update batch, envs,
...) environment states by reshaping one vmapped reset, broadcasts params / optimiser states
/ key to the update-batch size with `jnp.broadcast_to` and replicates them with flax's
`replicate(..., devices=jax.devices())`; `run_experiment` calls `learn(learner_state)`,
`jax.block_until_ready`, filters terminal-step metrics on the host, evaluates
`unreplicate_batch_dim(learner_state.params.actor_params)` (device axis kept) with
per-device keys through the evaluator pmap, keeps the best params for an absolute-metric
evaluation, and checkpoints `unreplicate_n_dims(learner_output.learner_state)`. flax,
optax, distrax, hydra and the logger are not used (plain jax.numpy networks and a
categorical policy, a hand-written clipped Adam). Written anew."""
import copy
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import mava_ff_ippo.env as environment
from mava_ff_ippo.evaluator import EnvModule, ExperimentOutput, make_eval_fns
from mava_ff_ippo.jax_utils import (get_final_step_metrics, merge_leading_dims, replicate,
                                    unreplicate_batch_dim, unreplicate_n_dims)


class Params(NamedTuple):
    actor_params: Any
    critic_params: Any


class OptStates(NamedTuple):
    actor_opt_state: Any
    critic_opt_state: Any


class LearnerState(NamedTuple):
    params: Any
    opt_states: Any
    key: Any
    env_state: Any
    timestep: Any


class PPOTransition(NamedTuple):
    done: Any
    action: Any
    value: Any
    reward: Any
    log_prob: Any
    obs: Any
    info: Any


class Categorical:
    def __init__(self, logits):
        self.logits = logits

    def sample(self, seed):
        return jax.random.categorical(seed, self.logits)

    def mode(self):
        return jnp.argmax(self.logits, axis=-1)

    def log_prob(self, action):
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0]

    def entropy(self, seed=None):
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


class Actor:
    def init(self, key, x):
        k1, k2 = jax.random.split(key)
        return {"torso": jax.random.normal(k1, (environment.OBS_DIM, 16)) / 2.0,
                "head": jax.random.normal(k2, (16, environment.ACTION_DIM)) * 0.01}

    def apply(self, params, obs):
        return Categorical(jnp.tanh(obs @ params["torso"]) @ params["head"])


class Critic:
    def init(self, key, x):
        k1, k2 = jax.random.split(key)
        return {"torso": jax.random.normal(k1, (environment.OBS_DIM, 16)) / 2.0,
                "head": jax.random.normal(k2, (16,)) * 0.1}

    def apply(self, params, obs):
        return jnp.tanh(obs @ params["torso"]) @ params["head"]


def make_optimiser(lr, max_grad_norm, eps=1e-5):
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": zeros}

    def update(grads, state):
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        grads = jax.tree_util.tree_map(
            lambda g: g * jnp.minimum(1.0, max_grad_norm / (norm + 1e-12)), grads)
        count = state["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, state["nu"], grads)
        c1, c2 = 1 - 0.9 ** count, 1 - 0.999 ** count
        updates = jax.tree_util.tree_map(
            lambda m, v: -lr * (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
        return updates, {"count": count, "mu": mu, "nu": nu}

    return init, update


def apply_updates(params, updates):
    return jax.tree_util.tree_map(lambda p, u: p + u, params, updates)


def get_learner_fn(env, apply_fns, update_fns, config):
    actor_apply_fn, critic_apply_fn = apply_fns
    actor_update_fn, critic_update_fn = update_fns

    def _update_step(learner_state, _):
        def _env_step(learner_state, _):
            params, opt_states, key, env_state, last_timestep = learner_state
            key, policy_key = jax.random.split(key)
            actor_policy = actor_apply_fn(params.actor_params, last_timestep.observation)
            value = critic_apply_fn(params.critic_params, last_timestep.observation)
            action = actor_policy.sample(seed=policy_key)
            log_prob = actor_policy.log_prob(action)
            env_state, timestep = jax.vmap(env.step, in_axes=(0, 0))(env_state, action)
            done = jax.tree_util.tree_map(
                lambda x: jnp.repeat(x, config["num_agents"]).reshape(config["num_envs"], -1),
                timestep.last())
            info = timestep.extras["episode_metrics"]
            transition = PPOTransition(done, action, value, timestep.reward, log_prob,
                                       last_timestep.observation, info)
            return LearnerState(params, opt_states, key, env_state, timestep), transition

        learner_state, traj_batch = jax.lax.scan(
            _env_step, learner_state, None, config["rollout_length"])

        params, opt_states, key, env_state, last_timestep = learner_state
        last_val = critic_apply_fn(params.critic_params, last_timestep.observation)

        def _calculate_gae(traj_batch, last_val):
            def _get_advantages(gae_and_next_value, transition):
                gae, next_value = gae_and_next_value
                done, value, reward = transition.done, transition.value, transition.reward
                gamma = config["gamma"]
                delta = reward + gamma * next_value * (1 - done) - value
                gae = delta + gamma * config["gae_lambda"] * (1 - done) * gae
                return (gae, value), gae

            _, advantages = jax.lax.scan(
                _get_advantages, (jnp.zeros_like(last_val), last_val), traj_batch,
                reverse=True, unroll=2)
            return advantages, advantages + traj_batch.value

        advantages, targets = _calculate_gae(traj_batch, last_val)

        def _update_epoch(update_state, _):
            def _update_minibatch(train_state, batch_info):
                params, opt_states, key = train_state
                traj_batch, advantages, targets = batch_info

                def _actor_loss_fn(actor_params, actor_opt_state, traj_batch, gae, key):
                    actor_policy = actor_apply_fn(actor_params, traj_batch.obs)
                    log_prob = actor_policy.log_prob(traj_batch.action)
                    ratio = jnp.exp(log_prob - traj_batch.log_prob)
                    gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                    loss_actor1 = ratio * gae
                    loss_actor2 = jnp.clip(ratio, 1.0 - config["clip_eps"],
                                           1.0 + config["clip_eps"]) * gae
                    loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
                    entropy = actor_policy.entropy(seed=key).mean()
                    return loss_actor - config["ent_coef"] * entropy, (loss_actor, entropy)

                def _critic_loss_fn(critic_params, critic_opt_state, traj_batch, targets):
                    value = critic_apply_fn(critic_params, traj_batch.obs)
                    value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
                        -config["clip_eps"], config["clip_eps"])
                    value_losses = jnp.square(value - targets)
                    value_losses_clipped = jnp.square(value_pred_clipped - targets)
                    value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()
                    return config["vf_coef"] * value_loss, (value_loss)

                key, entropy_key = jax.random.split(key)
                actor_grad_fn = jax.value_and_grad(_actor_loss_fn, has_aux=True)
                actor_loss_info, actor_grads = actor_grad_fn(
                    params.actor_params, opt_states.actor_opt_state, traj_batch, advantages,
                    entropy_key)
                critic_grad_fn = jax.value_and_grad(_critic_loss_fn, has_aux=True)
                critic_loss_info, critic_grads = critic_grad_fn(
                    params.critic_params, opt_states.critic_opt_state, traj_batch, targets)

                actor_grads, actor_loss_info = jax.lax.pmean(
                    (actor_grads, actor_loss_info), axis_name="batch")
                actor_grads, actor_loss_info = jax.lax.pmean(
                    (actor_grads, actor_loss_info), axis_name="device")
                critic_grads, critic_loss_info = jax.lax.pmean(
                    (critic_grads, critic_loss_info), axis_name="batch")
                critic_grads, critic_loss_info = jax.lax.pmean(
                    (critic_grads, critic_loss_info), axis_name="device")

                actor_updates, actor_new_opt_state = actor_update_fn(
                    actor_grads, opt_states.actor_opt_state)
                actor_new_params = apply_updates(params.actor_params, actor_updates)
                critic_updates, critic_new_opt_state = critic_update_fn(
                    critic_grads, opt_states.critic_opt_state)
                critic_new_params = apply_updates(params.critic_params, critic_updates)

                new_params = Params(actor_new_params, critic_new_params)
                new_opt_state = OptStates(actor_new_opt_state, critic_new_opt_state)
                loss_info = {
                    "total_loss": actor_loss_info[0] + critic_loss_info[0],
                    "value_loss": critic_loss_info[1],
                    "actor_loss": actor_loss_info[1][0],
                    "entropy": actor_loss_info[1][1],
                }
                return (new_params, new_opt_state, entropy_key), loss_info

            params, opt_states, traj_batch, advantages, targets, key = update_state
            key, shuffle_key, entropy_key = jax.random.split(key, 3)
            batch_size = config["rollout_length"] * config["num_envs"]
            permutation = jax.random.permutation(shuffle_key, batch_size)
            batch = (traj_batch, advantages, targets)
            batch = jax.tree_util.tree_map(lambda x: merge_leading_dims(x, 2), batch)
            shuffled_batch = jax.tree_util.tree_map(
                lambda x: jnp.take(x, permutation, axis=0), batch)
            minibatches = jax.tree_util.tree_map(
                lambda x: jnp.reshape(x, (config["num_minibatches"], -1, *x.shape[1:])),
                shuffled_batch)
            (params, opt_states, entropy_key), loss_info = jax.lax.scan(
                _update_minibatch, (params, opt_states, entropy_key), minibatches)
            update_state = (params, opt_states, traj_batch, advantages, targets, key)
            return update_state, loss_info

        update_state = (params, opt_states, traj_batch, advantages, targets, key)
        update_state, loss_info = jax.lax.scan(
            _update_epoch, update_state, None, config["ppo_epochs"])
        params, opt_states, traj_batch, advantages, targets, key = update_state
        learner_state = LearnerState(params, opt_states, key, env_state, last_timestep)
        return learner_state, (traj_batch.info, loss_info)

    def learner_fn(learner_state):
        batched_update_step = jax.vmap(_update_step, in_axes=(0, None), axis_name="batch")
        learner_state, (episode_info, loss_info) = jax.lax.scan(
            batched_update_step, learner_state, None, config["num_updates_per_eval"])
        return ExperimentOutput(learner_state=learner_state, episode_metrics=episode_info,
                                train_metrics=loss_info)

    return learner_fn


def learner_setup(env, keys, config):
    n_devices = len(jax.devices())
    config["num_agents"] = environment.NUM_AGENTS
    key, actor_net_key, critic_net_key = keys

    actor_network, critic_network = Actor(), Critic()
    actor_init, actor_update = make_optimiser(config["actor_lr"], config["max_grad_norm"])
    critic_init, critic_update = make_optimiser(config["critic_lr"], config["max_grad_norm"])

    init_x = jnp.zeros((1, environment.NUM_AGENTS, environment.OBS_DIM))
    actor_params = actor_network.init(actor_net_key, init_x)
    actor_opt_state = actor_init(actor_params)
    critic_params = critic_network.init(critic_net_key, init_x)
    critic_opt_state = critic_init(critic_params)
    params = Params(actor_params, critic_params)

    apply_fns = (actor_network.apply, critic_network.apply)
    update_fns = (actor_update, critic_update)

    learn = get_learner_fn(env, apply_fns, update_fns, config)
    learn = jax.pmap(learn, axis_name="device")

    key, *env_keys = jax.random.split(
        key, n_devices * config["update_batch_size"] * config["num_envs"] + 1)
    env_states, timesteps = jax.vmap(env.reset, in_axes=(0))(jnp.stack(env_keys))
    reshape_states = lambda x: x.reshape(
        (n_devices, config["update_batch_size"], config["num_envs"]) + x.shape[1:])
    env_states = jax.tree_util.tree_map(reshape_states, env_states)
    timesteps = jax.tree_util.tree_map(reshape_states, timesteps)

    key, step_keys = jax.random.split(key)
    opt_states = OptStates(actor_opt_state, critic_opt_state)
    replicate_learner = (params, opt_states, step_keys)
    broadcast = lambda x: jnp.broadcast_to(x, (config["update_batch_size"],) + x.shape)
    replicate_learner = jax.tree_util.tree_map(broadcast, replicate_learner)
    replicate_learner = replicate(replicate_learner, devices=jax.devices())

    params, opt_states, step_keys = replicate_learner
    init_learner_state = LearnerState(params, opt_states, step_keys, env_states, timesteps)
    return learn, actor_network, init_learner_state


def run_experiment(_config):
    config = copy.deepcopy(_config)
    n_devices = len(jax.devices())
    env, eval_env = EnvModule(), EnvModule()

    key, key_e, actor_net_key, critic_net_key = jax.random.split(
        jax.random.PRNGKey(config["seed"]), num=4)
    learn, actor_network, learner_state = learner_setup(
        env, (key, actor_net_key, critic_net_key), config)

    eval_keys = jax.random.split(key_e, n_devices)
    evaluator, absolute_metric_evaluator = make_eval_fns(eval_env, actor_network.apply, config)

    config["num_updates_per_eval"] = config["num_updates"] // config["num_evaluation"]

    max_episode_return = -jnp.inf
    best_params = None
    log = {"train": [], "act": [], "eval": [], "checkpoints": []}
    for eval_step in range(config["num_evaluation"]):
        learner_output = learn(learner_state)
        jax.block_until_ready(learner_output)

        episode_metrics, ep_completed = get_final_step_metrics(learner_output.episode_metrics)
        if ep_completed:
            log["act"].append(float(jnp.mean(episode_metrics["episode_return"])))
        log["train"].append([float(jnp.mean(v)) for _, v in
                             sorted(learner_output.train_metrics.items())])

        trained_params = unreplicate_batch_dim(learner_state.params.actor_params)
        key_e, *eval_keys = jax.random.split(key_e, n_devices + 1)
        eval_keys = jnp.stack(eval_keys)
        eval_keys = eval_keys.reshape(n_devices, -1)

        evaluator_output = evaluator(trained_params, eval_keys)
        jax.block_until_ready(evaluator_output)
        episode_return = jnp.mean(evaluator_output.episode_metrics["episode_return"])
        steps_per_eval = int(jnp.sum(evaluator_output.episode_metrics["episode_length"]))
        log["eval"].append([float(episode_return), steps_per_eval])

        unreplicated = unreplicate_n_dims(learner_output.learner_state)
        log["checkpoints"].append(jax.device_get(unreplicated.params.critic_params["head"]))

        if config["absolute_metric"] and max_episode_return <= episode_return:
            best_params = copy.deepcopy(trained_params)
            max_episode_return = episode_return

        learner_state = learner_output.learner_state

    eval_performance = float(jnp.mean(evaluator_output.episode_metrics["episode_return"]))

    if config["absolute_metric"]:
        key_e, *eval_keys = jax.random.split(key_e, n_devices + 1)
        eval_keys = jnp.stack(eval_keys)
        eval_keys = eval_keys.reshape(n_devices, -1)
        evaluator_output = absolute_metric_evaluator(best_params, eval_keys)
        jax.block_until_ready(evaluator_output)
        log["absolute"] = float(jnp.mean(evaluator_output.episode_metrics["episode_return"]))

    return eval_performance, learner_state, log
