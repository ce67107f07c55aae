"""functools.partial sites whose arguments are calls (`metrics_fn=make_metrics("train")`,
scenic's trainer) and that bind keyword-only parameters (`def step(w, x, *, scale)`): the
partial evaluates them once, where it is built, and so does the global site, in place, or
bound to a name there where it becomes a jitted def (static arguments); a partial binding
every keyword-only parameter leaves a function of positional parameters, which pmap maps."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

BUILT = []


def make_metrics(split):
    BUILT.append(split)  # counts how often the partial's argument is evaluated
    return lambda w: {split: jnp.sum(w)}


def step(w, x, *, scale, metrics_fn):
    g = jax.lax.pmean(jnp.mean(x, axis=0), "i")
    w = w - scale * g
    return w, metrics_fn(w)


def shifted(w, shift, *, scale):
    return w * scale + shift


def run():
    n = jax.local_device_count()
    p_step = jax.pmap(
        functools.partial(step, scale=len("abc") * 0.1, metrics_fn=make_metrics("train")),
        axis_name="i")
    p_shift = jax.pmap(functools.partial(shifted, scale=float(len(BUILT))), axis_name="i",
                       static_broadcasted_argnums=(1,))
    w = jnp.stack([jnp.ones((3,))] * n)
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(n, 2, 3)
    for _ in range(3):
        w, metrics = p_step(w, x)
        w = p_shift(w, 0.5)
    return {"w": np.asarray(w[0]), "train": np.asarray(metrics["train"][0]),
            "built": np.asarray(len(BUILT))}
