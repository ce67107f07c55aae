"""What a mapped function may be, besides a lambda or a def: a name bound once, in the
function that maps it, to a functools.partial, and read only where it is mapped
(site_discovery._local_sites, site_options.assigned_site). The fixture
partial_bound_to_a_name runs the form."""

from __future__ import annotations

from transforms.pipeline import migrate_source

_SOURCE = b'''import functools

import jax
import jax.numpy as jnp
import numpy as np


def spread(x, scale, axis_name):
    return jax.lax.psum(x * scale, axis_name)


def run():
    n = jax.local_device_count()
    measure = functools.partial(spread, scale=2.0, axis_name="i")
    MAPPED
    return np.asarray(out)
'''


def _codes(mapped: bytes):
    result = migrate_source(_SOURCE.replace(b"MAPPED", mapped), style="global")
    return {f.code for f in result.findings}, result


def test_a_partial_bound_to_a_name_is_mapped_as_that_partial():
    codes, result = _codes(b'out = jax.pmap(measure, axis_name="i")(jnp.ones((n, 3)))')
    assert "PM600" in codes and "PM612" not in codes
    assert "jax.shard_map(\n        measure," in result.source.decode()


def test_a_partial_name_read_twice_is_not_followed():
    """Read again (here passed on), the name may be called elsewhere: not the site's alone."""
    codes, result = _codes(b'out = jax.pmap(measure, axis_name="i")(jnp.ones((n, 3)))\n'
                           b'    print(measure)')
    assert "PM600" not in codes
    assert any("the mapped function is not a lambda" in f.message for f in result.findings)


def test_a_partial_name_rebound_is_not_followed():
    codes, result = _codes(b'measure = functools.partial(spread, scale=3.0, axis_name="i")\n'
                           b'    out = jax.pmap(measure, axis_name="i")(jnp.ones((n, 3)))')
    assert "PM600" not in codes


def test_a_partial_name_mapped_with_static_arguments_is_refused_by_name():
    source = _SOURCE.replace(b"spread(x, scale, axis_name)", b"spread(x, k, scale, axis_name)")
    source = source.replace(b"x * scale", b"x * scale * k").replace(
        b"MAPPED", b'p = jax.pmap(measure, axis_name="i", static_broadcasted_argnums=(1,))\n'
                   b'    out = p(jnp.ones((n, 3)), 2)')
    result = migrate_source(source, style="global")
    assert "PM600" not in {f.code for f in result.findings}
    assert any("a functools.partial bound to a name" in f.message for f in result.findings)
