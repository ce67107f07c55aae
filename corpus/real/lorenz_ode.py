"""Modelled on JAX's Lorentz ODE Solver notebook (RK4 on the Lorenz system, one initial
condition per device, then per-device rasterisation of the trajectories).

Source: github.com/jax-ml/jax, cloud_tpu_colabs/Lorentz_ODE_Solver.ipynb, read at commit
c980dc4e2a8ddc040b4b76ceef5e6a448fcaf6b5 (2024-04-19). All code here is written anew.

pmap features kept:
- `jax.pmap(integrate_rk4)(paths, dt * jnp.ones(n), steps * jnp.ones(n, int32))` called
  inline on a function that is already `@jax.jit`-decorated and holds a nested `@jax.jit`
  step; the step size and the step count arrive per device (the count is a traced
  `fori_loop` bound), and the initial conditions are written into the stacked (n, T, 3)
  buffer with `.at[:, 0].set(...)` before the call;
- a plotting function that defines a bare `@jax.pmap` inside itself, closing over the
  plot window and image size (Python tuples and ints of the enclosing call), and calling
  a module-level jitted rasteriser in a `fori_loop`; it is called twice with different
  image sizes (a fresh pmap each time);
- host post-processing of the pmap outputs (`np` tiling of the n images, a sum over the
  device axis);
- a single-device `functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))` plotter for
  comparison.

Scaled down: 150 RK4 steps of 0.005 per trajectory (the notebook: 4000 of 0.004 on 8
devices, 40000 on one), images of 40 x 30 and 80 x 60 pixels (not 200 x 150 / 800 x 600);
the notebook's Wu antialiased line drawer is replaced by a short bilinear point splat along
each segment, which keeps the shape (a jitted helper called per segment in a loop).

Across JAX versions the trajectories differ in the last bits (XLA 0.4.38 and 0.10.2 round
`x * y - BETA * z` differently, one fused, one not), and the chaotic system amplifies that:
the original on jax 0.4.38 and on jax 0.10.2 differ by up to ~2e-5, more than the check's
1e-6 tolerance.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax import random as jr

SIGMA = 10.0
BETA = 8.0 / 3.0
RHO = 28.0


@jax.jit
def lorenz_rhs(state, t):
    x, y, z = state
    return jnp.array([SIGMA * (y - x), x * (RHO - z) - y, x * y - BETA * z])


@jax.jit
def integrate_rk4(path, dt, length):
    @jax.jit
    def one_step(i, path):
        prev = path[i - 1]
        t = dt * i
        k1 = dt * lorenz_rhs(prev, t)
        k2 = dt * lorenz_rhs(prev + k1 / 2.0, t + dt / 2.0)
        k3 = dt * lorenz_rhs(prev + k2 / 2.0, t + dt / 2.0)
        k4 = dt * lorenz_rhs(prev + k3, t + dt)
        return path.at[i].set(prev + (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0)

    return lax.fori_loop(1, length, one_step, path)


def _splat(canvas, px, pz, weight):
    i0 = jnp.floor(px)
    j0 = jnp.floor(pz)
    fx = px - i0
    fz = pz - j0
    i0 = i0.astype(jnp.int32)
    j0 = j0.astype(jnp.int32)
    width, height = canvas.shape
    for di, dj, w in ((0, 0, (1 - fx) * (1 - fz)), (1, 0, fx * (1 - fz)),
                      (0, 1, (1 - fx) * fz), (1, 1, fx * fz)):
        ii, jj = i0 + di, j0 + dj
        inside = (ii >= 0) & (ii < width) & (jj >= 0) & (jj < height)
        canvas = canvas.at[jnp.clip(ii, 0, width - 1), jnp.clip(jj, 0, height - 1)].add(
            jnp.where(inside, w * weight, 0.0))
    return canvas


@jax.jit
def draw_segment(canvas, x0, z0, x1, z1):
    length = jnp.sqrt((x1 - x0) ** 2 + (z1 - z0) ** 2)
    for t in (0.25, 0.75):
        canvas = _splat(canvas, x0 + t * (x1 - x0), z0 + t * (z1 - z0), length / 2.0)
    return canvas


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def plot_one(xs, zs, xlim, zlim, width, height):
    canvas = jnp.zeros((width, height))
    px = (xs - xlim[0]) / (1.0 * (xlim[1] - xlim[0])) * width
    pz = (zs - zlim[0]) / (1.0 * (zlim[1] - zlim[0])) * height

    def body(i, canvas):
        return draw_segment(canvas, px[i - 1], pz[i - 1], px[i], pz[i])

    return lax.fori_loop(1, px.shape[0], body, canvas)


def plot_on_devices(all_xs, all_zs, xlim, zlim, width, height):
    count = all_xs.shape[0]
    canvases = jnp.zeros((count, width, height))

    @jax.pmap
    def draw(canvas, xs, zs):
        px = (xs - xlim[0]) / (1.0 * (xlim[1] - xlim[0])) * width
        pz = (zs - zlim[0]) / (1.0 * (zlim[1] - zlim[0])) * height

        def body(i, canvas):
            return draw_segment(canvas, px[i - 1], pz[i - 1], px[i], pz[i])

        return lax.fori_loop(1, px.shape[0], body, canvas)

    return draw(canvases, all_xs, all_zs)


def tile_images(images, rows, cols):
    width, height = images.shape[-2:]
    images = np.reshape(images, (-1, width, height))
    rows = min(rows, images.shape[0])
    cols = min(images.shape[0] // rows, cols)
    images = images[: rows * cols].reshape(rows, cols, width, height)
    return images.transpose(0, 2, 1, 3).reshape(rows * width, cols * height)


def run():
    n = jax.local_device_count()
    steps = 150
    paths = jnp.zeros((n, steps, 3))
    start = jr.uniform(jr.PRNGKey(1), minval=-1.0, maxval=1.0, shape=(n, 3))
    start = start * jnp.array([18.0, 18.0, 1.0]) + jnp.array([0.0, 0.0, 10.0])
    paths = paths.at[:, 0].set(start)

    paths = jax.pmap(integrate_rk4)(
        paths, 0.005 * jnp.ones(n), steps * jnp.ones(n, dtype=np.int32)
    ).block_until_ready()

    xlim, zlim = (-20, 20), (0, 50)
    single = plot_one(paths[0, :, 0], paths[0, :, 2], xlim, zlim, 40, 30)
    small = plot_on_devices(paths[..., 0], paths[..., 2], xlim, zlim, 40, 30)
    large = plot_on_devices(paths[..., 0], paths[..., 2], xlim, zlim, 80, 60)
    return {
        "paths": np.asarray(paths),
        "single_image": np.asarray(single),
        "device_images": np.asarray(small),
        "tiled": tile_images(np.asarray(small), 4, 2),
        "overlay": np.asarray(jnp.sum(large, axis=0)),
    }
