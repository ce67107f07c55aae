"""What a mapped function may be, besides a lambda or a def: a name bound once, in the
function that maps it, to a functools.partial, and read only where it is mapped
(site_discovery._local_sites, site_options.assigned_site); a module-level pmap of a bound
method (any function whose body is not read) that is only called. A tree of leaves of several
layouts is not given to a function run as jax.vmap. A pmap under a decorator of the module
names what that decorator does. The fixtures partial_bound_to_a_name and
module_level_bound_method run the forms."""

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


_MODULE_LEVEL = b'''import jax
import jax.numpy as jnp
import numpy as np


class Model:
    def apply(self, w, x):
        return jnp.tanh(x @ w)


model = Model()
p_apply = jax.pmap(model.apply)
AFTER


def run():
    n = jax.local_device_count()
    w = jax.device_put_replicated(jnp.ones((3, 2)), jax.local_devices())
    return np.asarray(p_apply(w, jnp.arange(n * 12.0).reshape(n, 4, 3)))
'''


def _module_level(after: bytes = b""):
    result = migrate_source(_MODULE_LEVEL.replace(b"AFTER", after), style="global")
    return {f.code for f in result.findings}, result


def test_a_module_level_pmap_of_a_bound_method_runs_per_device():
    """Only called, always with two positional arguments, and `model` bound once: the method,
    whose body is not read, runs as jax.vmap over each device's block."""
    codes, result = _module_level()
    assert "PM600" in codes and "PM612" not in codes
    assert "jax.vmap(model.apply, in_axes=(None, 0))" in result.source.decode()


def test_a_rebound_object_keeps_the_contract():
    """`model` rebound: the migrated step, reading `model.apply` when traced, could see the
    other object where pmap kept the first."""
    codes, result = _module_level(b"model = Model()")
    assert "PM600" not in codes
    assert any("the mapped function is not a lambda" in f.message for f in result.findings)


def test_an_assigned_method_keeps_the_contract():
    codes, _ = _module_level(b"Model.apply = lambda self, w, x: x @ w")
    assert "PM600" not in codes


def test_a_pmap_of_a_bound_method_read_other_than_called_keeps_the_contract():
    codes, _ = _module_level(b"STEPS = [p_apply]")
    assert "PM600" not in codes


def test_a_tree_of_replicated_and_batch_leaves_is_not_vmapped():
    """jax.vmap's in_axes is one per argument: a dict with a replicated leaf and a merged batch
    leaf given to a function run as jax.vmap over stacked rows would be mapped over an axis
    the replicated leaf does not have (a wrong rewrite before: vmap's sizes disagreed)."""
    source = _MODULE_LEVEL.replace(b"AFTER", b"").replace(
        b"p_apply = jax.pmap(model.apply)\n", b"").replace(
        b"return jnp.tanh(x @ w)", b'return jnp.tanh(x @ w["w"]) + w["b"]').replace(
        b"w = jax.device_put_replicated(jnp.ones((3, 2)), jax.local_devices())",
        b'p_apply = jax.pmap(model.apply)\n'
        b'    w = {"w": jnp.ones((n, 3, 2)), "b": jnp.arange(n * 2.0).reshape(n, 2)}')
    assert b"    p_apply = jax.pmap(model.apply)" in source  # a local site
    result = migrate_source(source, style="global")
    assert "PM600" not in {f.code for f in result.findings}
    assert any("a tree whose leaves are not all stacked rows" in f.message
               for f in result.findings)


_DECORATED = b'''import functools

import jax
import jax.numpy as jnp
import numpy as np

DECORATOR


@deco
@functools.partial(jax.pmap, axis_name="i")
def step(x):
    return jax.lax.psum(x, "i")


def run():
    return np.asarray(step(jnp.ones((jax.local_device_count(), 3))))
'''


def _decorated_finding(decorator: bytes) -> str:
    result = migrate_source(_DECORATED.replace(b"DECORATOR", decorator), style="global")
    assert "PM600" not in {f.code for f in result.findings}
    return next(f.message for f in result.findings if "stacked with the decorator" in f.message)


def test_a_module_decorator_that_runs_code_around_the_call_is_named_with_that_code():
    message = _decorated_finding(
        b"def deco(fn):\n    def call(x):\n        x = x * 2\n        return fn(x)\n\n"
        b"    return call")
    assert "`deco` (line 7), whose wrapper `call` runs code besides the call (line 9)" \
        in message


def test_a_pass_through_module_decorator_is_named_as_such():
    message = _decorated_finding(
        b"def deco(fn):\n    def call(x):\n        return fn(x)\n\n    return call")
    assert "whose wrapper `call` only passes the calls through (not followed yet)" in message


def test_a_decorator_from_elsewhere_keeps_the_general_finding():
    message = _decorated_finding(b"from functools import lru_cache as deco")
    assert "`deco` (only a bare @jax.jit is followed)" in message


def test_a_pmap_in_one_branch_of_a_conditional_names_the_other_and_the_nested_def():
    """`_f = jit(_f) if cpu else pmap(_f)` in a def nested in a factory: the value is a pmap
    only when the condition holds; the finding names the other branch and the def it is in."""
    source = b'''import jax
import numpy as np


def make(cpu):
    def mapped(x):
        def _f(v):
            return v * 2

        _f = jax.jit(_f) if cpu else jax.pmap(_f)
        return _f(x)

    return mapped


def run():
    return np.asarray(make(False)(np.ones((jax.local_device_count(), 3))))
'''
    result = migrate_source(source, style="global")
    message = next(f.message for f in result.findings if "conditional" in f.message)
    assert "one branch of a conditional (the other: `jax.jit(_f)`) in `mapped` (in `make`)" \
        in message
