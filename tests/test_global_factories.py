"""Factories of pmaps in the global style: what makes a factory's result its site's calls, and
what does not (the fixture pairs inline_factory and factory_stored_and_called_later show the
rewrites and run them)."""

from __future__ import annotations

from transforms.pipeline import migrate_source

_FACTORY = b'''import jax
import jax.numpy as jnp
import numpy as np


def make_update_fn(lr, axis_name="batch"):
    def update(w, x):
        return w - lr * jax.lax.pmean(jnp.mean(x, axis=0), axis_name)

    return jax.pmap(update, axis_name=axis_name)


def run():
    n = jax.local_device_count()
    update_fn = make_update_fn(0.1)
    w = jnp.stack([jnp.ones((3,))] * n)
    x = np.ones((n, 4, 3), np.float32)
    for _ in range(3):
        w = update_fn(w, x)
    return np.asarray(w[0])
'''


def _codes(source: bytes) -> list[str]:
    return sorted(f.code for f in migrate_source(source, style="global").findings)


def test_a_stored_factory_result_only_called_is_the_sites_caller():
    assert _codes(_FACTORY) == ["PM600"]


def test_a_stored_result_used_otherwise_keeps_the_contract():
    """Passed on (here to a list), its calls are not all seen."""
    source = _FACTORY.replace(b"    return np.asarray(w[0])",
                              b"    steps = [update_fn]\n    return np.asarray(w[0])")
    assert "PM600" not in _codes(source)


def test_a_stored_result_bound_twice_keeps_the_contract():
    source = _FACTORY.replace(b"    return np.asarray(w[0])",
                              b"    update_fn = make_update_fn(0.2)\n    return np.asarray(w[0])")
    assert "PM600" not in _codes(source)


def test_an_axis_name_a_call_passes_is_not_a_constant():
    source = _FACTORY.replace(b"make_update_fn(0.1)", b'make_update_fn(0.1, "other")')
    assert "PM600" not in _codes(source) and "PM602" in _codes(source)


def test_an_axis_name_left_to_its_default_reads_as_the_default():
    text = migrate_source(_FACTORY, style="global").source.decode()
    assert 'mesh=_mesh("batch")' in text
    assert "jax.lax.pmean(jnp.mean(x, axis=0), axis_name)" in text  # the body still reads it
