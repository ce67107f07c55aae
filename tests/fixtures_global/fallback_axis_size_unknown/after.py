"""PM604: in_axes=1 on an array whose axis 1 is not provably the device count. pmap maps
whatever size it has (up to the device count); shard_map over every device would need that
size to be the mesh's, so the site stays faithful."""
import functools

import jax
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _pmap_style_shard_map


@functools.partial(_pmap_style_shard_map, axis_name="_pmap_axis", in_specs=P(None, "_pmap_axis"))
def column_softmax(x):
    return jax.nn.softmax(x)


def run():
    n = jax.local_device_count()
    x = np.arange(4 * max(1, n // 2), dtype=np.float32).reshape(4, max(1, n // 2))
    return {"softmax": np.asarray(column_softmax(x))}
