# pmap-migrate-test: original needs legacy jax
"""A notebook-style script (the ViT colab's shape): parameters replicated in top-level code,
then handed to a def that calls the module-level pmap with them, before and after an update
written at the top level too. The def is read inside the top-level code that calls it."""
import jax
import jax.numpy as jnp
import numpy as np

n = jax.local_device_count()
apply_repl = jax.pmap(lambda params, inputs: jnp.tanh(inputs @ params["w"]))


def get_score(params_repl):
    inputs = np.arange(n * 2 * 3, dtype=np.float32).reshape(n, 2, 3) / 10.0
    predicted = apply_repl(params_repl, inputs)
    return float(predicted.sum())


params_repl = jax.device_put_replicated({"w": jnp.ones((3, 4))}, jax.local_devices())
score_before = get_score(params_repl)
params_repl = jax.tree_util.tree_map(lambda w: w * 0.5, params_repl)
score_after = get_score(params_repl)


def run():
    return {"before": np.asarray(score_before), "after": np.asarray(score_after)}
