"""Modelled on the pmap examples of JAX's Pmap Cookbook notebook.

Source: github.com/jax-ml/jax, cloud_tpu_colabs/Pmap_Cookbook.ipynb, read at commit
c980dc4e2a8ddc040b4b76ceef5e6a448fcaf6b5 (2024-04-19, PRNGKey era; the code cells are
unchanged up to ee6cce5601fe1a81cec914bf50f3cbd9a72d69b1 except `random.key`).
All code here is written anew; only the shape of each pmap use is kept.

pmap features kept:
- inline `pmap(lambda ...)(...)` calls with no axis name, and `pmap(jnp.add)` /
  `pmap(jnp.mean)` with a library function as the callee;
- the outputs of a pmap used as ordinary arrays afterwards (`/ 2`, `np.sin`);
- one PRNG key per device from `random.split(key, n)`, mapped into a sampler, whose
  output feeds two more inline pmaps (`x @ x.T`, then `jnp.mean`);
- `lax.psum` normalisation twice: a lambda assigned to a name then
  `pmap(name, axis_name=...)`, and a `@partial(pmap, axis_name=...)` decorator;
- a 1-D cellular automaton split over the devices: the decorated step exchanges one cell
  with each neighbour by two module-level helpers that build a ring permutation from the
  device count and call `lax.ppermute`; the host loop feeds each output back in;
- grad taken through a pmap whose body itself takes a grad over an inner function that
  closes over body values (the notebook's inner function is a second pmap; see the
  scaling note).

Additions not in the notebook (the migration brief asked for them): a `lax.pmean`
centring pmap and an `in_axes=(0, None)` pmap broadcasting one argument.

Scaled down: the random matrices are (n, 48, 64) instead of (8, 5000, 6000); the board has
5 cells per device and runs 20 steps. The notebook's doubly nested pmaps (rows/cols and
pmap-inside-pmap) do not run on jax 0.10, so they live in `cookbook_nested_pmap.py` and
`pmap_in_pmap_grad.py`; here the inner function of the grad example is mapped with `vmap`. Plots and jaxpr printing are
dropped.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import grad, lax, pmap, random, vmap


def shift_right(block, axis):
    count = jax.local_device_count()
    pairs = [(src, (src + 1) % count) for src in range(count)]
    return lax.ppermute(block, perm=pairs, axis_name=axis)


def shift_left(block, axis):
    count = jax.local_device_count()
    pairs = [((src + 1) % count, src) for src in range(count)]
    return lax.ppermute(block, perm=pairs, axis_name=axis)


def rule30(cells):
    west, here, east = cells[:-2], cells[1:-1], cells[2:]
    return lax.bitwise_xor(west, lax.bitwise_or(here, east))


@functools.partial(pmap, axis_name="ring")
def automaton_step(segment):
    first, last = segment[:1], segment[-1:]
    from_east = shift_left(first, "ring")
    from_west = shift_right(last, "ring")
    widened = jnp.concatenate([from_west, segment, from_east])
    return rule30(widened)


@functools.partial(pmap, axis_name="k")
def fraction_of_total(v):
    return v / lax.psum(v, "k")


def run():
    n = jax.local_device_count()
    out = {}

    squares = pmap(lambda v: v ** 2)(jnp.arange(n))
    out["squares"] = np.asarray(squares)
    out["squares_halved"] = np.asarray(squares / 2)
    out["squares_sin"] = np.asarray(np.sin(squares))

    left = jnp.linspace(1.0, 2.0, n)
    right = jnp.linspace(-3.0, 5.0, n)
    out["vmap_add"] = np.asarray(vmap(jnp.add)(left, right))
    out["pmap_add"] = np.asarray(pmap(jnp.add)(left, right))

    def dense_tanh(a, b):
        return jnp.tanh(jnp.dot(a, b))

    lhs = jnp.ones((n, 2, 3)) * 0.25
    rhs = jnp.ones((n, 3, 4)) * jnp.arange(1.0, n + 1.0)[:, None, None]
    out["dense_tanh"] = np.asarray(pmap(dense_tanh)(lhs, rhs))

    keys = random.split(random.PRNGKey(0), n)
    mats = pmap(lambda k: random.normal(k, (48, 64)))(keys)
    grams = pmap(lambda m: jnp.dot(m, m.T))(mats)
    out["gram_shape"] = np.asarray(grams.shape)
    out["gram_means"] = np.asarray(pmap(jnp.mean)(grams))

    share = lambda v: v / lax.psum(v, axis_name="k")
    out["share_inline"] = np.asarray(pmap(share, axis_name="k")(jnp.arange(1.0, n + 1.0)))
    out["share_decorated"] = np.asarray(fraction_of_total(jnp.arange(2.0, n + 2.0) ** 2))

    centred = pmap(lambda v: v - lax.pmean(v, "k"), axis_name="k")(jnp.arange(n * 3.0).reshape(n, 3))
    out["centred"] = np.asarray(centred)

    def scale_rows(row, factor):
        return row * factor + lax.axis_index("k")

    factor = jnp.array([1.0, -2.0, 0.5])
    out["scaled_rows"] = np.asarray(
        pmap(scale_rows, axis_name="k", in_axes=(0, None))(jnp.ones((n, 3)), factor)
    )

    cells_per_device = 5
    board = np.zeros(n * cells_per_device, dtype=bool)
    board[board.shape[0] // 2] = True
    tiles = board.reshape((n, -1))
    history = [np.asarray(tiles).ravel()]
    for _ in range(20):
        tiles = automaton_step(tiles)
        history.append(np.asarray(tiles).ravel())
    out["automaton"] = np.stack(history)

    grid = jnp.arange(n * 2.0).reshape((n, 2)) / (4.0 * n)

    @pmap
    def outer(x):
        y = jnp.sin(x)

        def inner(z):
            return jnp.cos(z) * jnp.tan(y.sum()) * jnp.tanh(x).sum()

        return grad(lambda w: jnp.sum(vmap(inner)(w)))(x)

    out["outer"] = np.asarray(outer(grid))
    out["grad_of_outer"] = np.asarray(grad(lambda x: jnp.sum(outer(x)))(grid))
    return out
