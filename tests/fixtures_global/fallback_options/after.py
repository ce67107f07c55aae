"""PM602: in_axes=1 on a lambda. shard_map hands the body a (rows, 1) block where pmap hands
it a squeezed (rows,) column, and a lambda has no statement to drop that axis in."""
import jax
import numpy as np
from jax.sharding import PartitionSpec as P
from _pmap_helpers import _pmap_style_shard_map


def run():
    n = jax.local_device_count()
    x = np.arange(4 * n, dtype=np.float32).reshape(4, n)
    return {
        "softmax": np.asarray(
            _pmap_style_shard_map(
                lambda c: jax.nn.softmax(c), axis_name="_pmap_axis", in_specs=P(None, "_pmap_axis")
            )(x)
        )
    }
