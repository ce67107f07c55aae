"""Modelled on scenic/model_lib/base_models/classification_model.py and model_utils.py
(@ 4a38d475ee89): the model object carries `flax_model`, `loss_function` (softmax
cross-entropy plus L2 on the params) and `get_metrics_fn(split)`, whose metrics are
`(value, normalizer)` pairs passed through `psum_metric_normalizer` (`lax.psum` of both over
"batch", so called only inside the trainer's pmaps). The flax module is a stand-in: a
flatten-dense-batchnorm-dense network with `batch_stats` in plain jax.numpy. Written anew."""
import functools
import math

import jax
import jax.numpy as jnp


def psum_metric_normalizer(metrics, axis_name="batch"):
    psumed_metric = jax.lax.psum(jnp.sum(metrics[0]), axis_name=axis_name)
    psumed_normalizer = jax.lax.psum(jnp.sum(metrics[1]), axis_name=axis_name)
    return (psumed_metric, psumed_normalizer)


def weighted_correctly_classified(logits, one_hot_targets, weights):
    correct = (jnp.argmax(logits, -1) == jnp.argmax(one_hot_targets, -1)).astype(jnp.float32)
    return correct * weights


def weighted_unnormalized_softmax_cross_entropy(logits, one_hot_targets, weights):
    return -jnp.sum(one_hot_targets * jax.nn.log_softmax(logits), axis=-1) * weights


def classification_metrics_function(logits, batch, target_is_onehot=True):
    one_hot_targets = batch["label"]
    weights = batch.get("batch_mask")
    evaluated = {
        "accuracy": psum_metric_normalizer(
            (weighted_correctly_classified(logits, one_hot_targets, weights), weights.sum())),
        "loss": psum_metric_normalizer(
            (weighted_unnormalized_softmax_cross_entropy(logits, one_hot_targets, weights),
             weights.sum())),
    }
    return evaluated


class FlaxModel:
    """init / apply with a mutable `batch_stats` collection, as a flax BatchNorm model."""

    def __init__(self, hidden, num_classes, dropout_rate):
        self.hidden, self.num_classes, self.dropout_rate = hidden, num_classes, dropout_rate

    def init(self, rng, inputs):
        k1, k2 = jax.random.split(rng)
        d = int(math.prod(inputs.shape[1:]))
        return {
            "params": {"dense": jax.random.normal(k1, (d, self.hidden)) / math.sqrt(d),
                       "bn_scale": jnp.ones((self.hidden,)),
                       "head": jax.random.normal(k2, (self.hidden, self.num_classes)) * 0.1,
                       "head_bias": jnp.zeros((self.num_classes,))},
            "batch_stats": {"mean": jnp.zeros((self.hidden,)), "var": jnp.ones((self.hidden,))},
        }

    def apply(self, variables, inputs, mutable=False, train=False, rngs=None, debug=False):
        p, stats = variables["params"], variables["batch_stats"]
        h = inputs.reshape((inputs.shape[0], -1)) @ p["dense"]
        if train:
            mean, var = h.mean(0), h.var(0)
            new_stats = {"mean": 0.9 * stats["mean"] + 0.1 * mean,
                         "var": 0.9 * stats["var"] + 0.1 * var}
        else:
            mean, var, new_stats = stats["mean"], stats["var"], stats
        h = jax.nn.gelu((h - mean) * jax.lax.rsqrt(var + 1e-5) * p["bn_scale"])
        if train:
            keep = jax.random.bernoulli(rngs["dropout"], 1.0 - self.dropout_rate, h.shape)
            h = jnp.where(keep, h / (1.0 - self.dropout_rate), 0.0)
        logits = h @ p["head"] + p["head_bias"]
        if mutable:
            return logits, {"batch_stats": new_stats}
        return logits


class ClassificationModel:
    def __init__(self, config, dataset_meta_data):
        self.config = config
        self.dataset_meta_data = dataset_meta_data
        self.flax_model = FlaxModel(config["hidden"], dataset_meta_data["num_classes"],
                                    config["dropout_rate"])

    def get_metrics_fn(self, split=None):
        del split
        return functools.partial(classification_metrics_function, target_is_onehot=True)

    def loss_function(self, logits, batch, model_params=None):
        weights = batch.get("batch_mask")
        loss = jnp.sum(weighted_unnormalized_softmax_cross_entropy(
            logits, batch["label"], weights)) / jnp.sum(weights)
        if self.config.get("l2_decay_factor") is not None:
            l2 = sum(jnp.sum(x ** 2) for x in jax.tree_util.tree_leaves(model_params))
            loss = loss + 0.5 * self.config["l2_decay_factor"] * l2
        return loss
