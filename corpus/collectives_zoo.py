"""One pmap body per collective: psum, pmean, pmax, pmin, all_gather (tiled and not),
ppermute ring shift, axis_index, all_to_all and psum_scatter (tiled and not).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

@functools.partial(jax.pmap, axis_name="i")
def p_psum(x):
    return jax.lax.psum(x, "i")


@functools.partial(jax.pmap, axis_name="i")
def p_pmean(x):
    return jax.lax.pmean(x, "i")


@functools.partial(jax.pmap, axis_name="i")
def p_pmax(x):
    return jax.lax.pmax(x, "i")


@functools.partial(jax.pmap, axis_name="i")
def p_pmin(x):
    return jax.lax.pmin(x, "i")


@functools.partial(jax.pmap, axis_name="i")
def p_all_gather(x):
    return jax.lax.all_gather(x, "i")


@functools.partial(jax.pmap, axis_name="i")
def p_all_gather_tiled(x):
    return jax.lax.all_gather(x, "i", tiled=True)


@functools.partial(jax.pmap, axis_name="i")
def p_axis_index(x):
    return jax.lax.axis_index("i") + jnp.zeros(x.shape, jnp.int32)


@functools.partial(jax.pmap, axis_name="i")
def p_all_to_all(x):
    # Per-device x has shape (n, k): chunk j goes to device j.
    return jax.lax.all_to_all(x, "i", split_axis=0, concat_axis=0)


@functools.partial(jax.pmap, axis_name="i")
def p_psum_scatter(x):
    # Per-device leading dim n: device j receives the sum of chunk j.
    return jax.lax.psum_scatter(x, "i")


@functools.partial(jax.pmap, axis_name="i")
def p_psum_scatter_tiled(x):
    return jax.lax.psum_scatter(x, "i", scatter_dimension=0, tiled=True)


def ring_shift(n):
    perm = [(i, (i + 1) % n) for i in range(n)]
    return jax.pmap(lambda x: jax.lax.ppermute(x, "i", perm=perm), axis_name="i")


def run():
    n = jax.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    sq = np.arange(n * n * 2, dtype=np.float32).reshape(n, n, 2)

    out = {
        "psum": p_psum(x),
        "pmean": p_pmean(x),
        "pmax": p_pmax(x),
        "pmin": p_pmin(x),
        "all_gather": p_all_gather(x),
        "all_gather_tiled": p_all_gather_tiled(x),
        "ppermute_ring": ring_shift(n)(x),
        "axis_index": p_axis_index(x),
        "all_to_all": p_all_to_all(sq),
        "psum_scatter": p_psum_scatter(sq),
        "psum_scatter_tiled": p_psum_scatter_tiled(sq),
    }
    return {k: np.asarray(v) for k, v in out.items()}
