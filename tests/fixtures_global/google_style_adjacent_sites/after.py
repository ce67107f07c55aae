"""Google's style (2-space blocks, single quotes), two module-level pmaps on adjacent lines,
and a lambda whose parameter has the name of the caller's batch. The steps are written in
the module's own indentation and quotes, two blank lines apart; the lambda closes over no
`x`, so both sites go global."""
# pmap-migrate-test: original needs legacy jax
import functools

import jax
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


@functools.cache
def _mesh(axis_name):
  """The 1-D mesh over all devices that the steps of `axis_name` run on, built at first use
  (never at import)."""
  return jax.make_mesh((jax.device_count(),), (axis_name,), axis_types=(AxisType.Auto,))


def total(x):
  return jax.lax.psum(x, 'i')


@jax.jit
def p_total(x):
  return jax.shard_map(
      total, mesh=_mesh('i'), in_specs=(P('i'),), out_specs=P(), check_vma=False
  )(x)


@jax.jit
def p_double(x):
  return jax.shard_map(
      lambda x: x * 2, mesh=_mesh('i'), in_specs=(P('i'),), out_specs=P('i'), check_vma=False
  )(x)


def run():
  n = jax.local_device_count()
  x = np.arange(n * 2, dtype=np.float32)
  return {'total': np.asarray(p_total(x)), 'double': np.asarray(p_double(x))}
