"""Import aliases and axis_name spellings: `import jax as j` (j.pmap),
`from jax import pmap as pm`, `from jax import pmap`; axis_name passed positionally,
from a module constant and from a class attribute.
"""
import functools

import jax
import jax as j
import jax.numpy as jnp
import numpy as np
from jax import pmap
from jax import pmap as pm

AXIS = "dev"


class Cfg:
    axis = "replica"
    scale = 3.0


def centered(x):
    return x - jax.lax.pmean(x, "i")


def total(x):
    return jax.lax.psum(x, AXIS)


def scaled_max(x):
    return jax.lax.pmax(x, Cfg.axis) * Cfg.scale


@functools.partial(pm, axis_name=AXIS)
def share(x):
    return jax.lax.all_gather(jnp.sum(x), AXIS)


def run():
    n = j.local_device_count()
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2) ** 2

    c = j.pmap(centered, "i")(x)         # axis_name given positionally
    t = pm(total, axis_name=AXIS)(x)     # aliased pmap, module-constant axis name
    m = pmap(scaled_max, axis_name=Cfg.axis)(x)  # class-attribute axis name
    s = share(x)
    sq = pmap(lambda v: v * v)(x)

    return {
        "centered": np.asarray(c),
        "total": np.asarray(t),
        "scaled_max": np.asarray(m),
        "shared": np.asarray(s),
        "squared": np.asarray(sq),
    }
