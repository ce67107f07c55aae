# -*- coding: latin-1 -*-
"""A module declared latin-1: the global style keeps it faithful (PM607)."""
import jax
import jax.numpy as jnp
from _pmap_helpers import _pmap_style_shard_map

LABEL = "café"


@_pmap_style_shard_map
def double(x):
    return 2 * x


def run():
    n = jax.local_device_count()
    return double(jnp.ones((n, 3)))
