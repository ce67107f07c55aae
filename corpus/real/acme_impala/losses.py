"""Modelled on acme/jax/losses/impala.py (google-deepmind/acme @ 8d4cc040db23): a factory
closing over the unroll function and the loss weights, returning a per-sequence
entropy-regularised actor-critic loss with V-trace, `mapreduce`d over the batch with
`in_axes=(None, 0)`. rlax is not used: the importance ratios, V-trace targets and the
policy-gradient and entropy terms are written here. Written anew."""
import jax
import jax.numpy as jnp
import numpy as np

from acme_impala import jax_utils


def importance_ratios(logits, behaviour_logits, actions):
    log_pi = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], -1)[:, 0]
    log_mu = jnp.take_along_axis(jax.nn.log_softmax(behaviour_logits), actions[:, None], -1)[:, 0]
    return jnp.exp(log_pi - log_mu)


def vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, clip_rho=1.0, clip_pg_rho=1.0, lambda_=1.0):
    rhos = jnp.minimum(clip_rho, rho_tm1)
    cs = lambda_ * jnp.minimum(1.0, rho_tm1)
    deltas = rhos * (r_t + discount_t * v_t - v_tm1)

    def backwards(acc, inputs):
        delta, discount, c = inputs
        acc = delta + discount * c * acc
        return acc, acc

    _, corrections = jax.lax.scan(backwards, jnp.zeros_like(v_t[0]),
                                  (deltas, discount_t, cs), reverse=True)
    vs = jax.lax.stop_gradient(corrections + v_tm1)
    vs_t = jnp.concatenate([vs[1:], v_t[-1:]])
    pg_adv = jnp.minimum(clip_pg_rho, rho_tm1) * (r_t + discount_t * vs_t - v_tm1)
    return vs - v_tm1, jax.lax.stop_gradient(pg_adv)


def impala_loss(unroll_fn, *, discount, max_abs_reward=np.inf, baseline_cost=1.0,
                entropy_cost=0.0):
    def loss_fn(params, sample):
        data = sample.data
        observations, actions, rewards, discounts, extra = (
            data.observation, data.action, data.reward, data.discount, data.extras)
        initial_state = jax.tree_util.tree_map(lambda s: s[0], extra["core_state"])
        behaviour_logits = extra["logits"]
        rewards = jnp.clip(rewards, -max_abs_reward, max_abs_reward)

        (logits, values), _ = unroll_fn(params, observations, initial_state)
        rhos = importance_ratios(logits[:-1], behaviour_logits[:-1], actions[:-1])
        errors, pg_advantage = vtrace(values[:-1], values[1:], rewards[:-1],
                                      discounts[:-1] * discount, rhos)
        critic_loss = jnp.square(errors)
        log_pi = jnp.take_along_axis(jax.nn.log_softmax(logits[:-1]),
                                     actions[:-1, None], -1)[:, 0]
        policy_gradient_loss = -log_pi * pg_advantage
        probs = jax.nn.softmax(logits[:-1])
        entropy = -jnp.sum(probs * jax.nn.log_softmax(logits[:-1]), axis=-1)
        entropy_loss = -entropy

        mean_loss = jnp.mean(policy_gradient_loss + baseline_cost * critic_loss
                             + entropy_cost * entropy_loss)
        metrics = {
            "policy_loss": jnp.mean(policy_gradient_loss),
            "critic_loss": jnp.mean(baseline_cost * critic_loss),
            "entropy_loss": jnp.mean(entropy_cost * entropy_loss),
            "entropy": jnp.mean(entropy_loss),
        }
        return mean_loss, metrics

    return jax_utils.mapreduce(loss_fn, in_axes=(None, 0))
