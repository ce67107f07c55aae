"""Google's style (2-space blocks, single quotes), two module-level pmaps on adjacent lines,
and a lambda whose parameter has the name of the caller's batch. The steps are written in
the module's own indentation and quotes, two blank lines apart; the lambda closes over no
`x`, so both sites go global."""
# pmap-migrate-test: original needs legacy jax
import jax
import numpy as np


def total(x):
  return jax.lax.psum(x, 'i')


p_total = jax.pmap(total, axis_name='i')
p_double = jax.pmap(lambda x: x * 2)


def run():
  n = jax.local_device_count()
  x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
  return {'total': np.asarray(p_total(x)), 'double': np.asarray(p_double(x))}
