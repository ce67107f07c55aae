"""A caller returning values in the global layout, where every call of it in the module drops
its result or returns it as is (transforms/global_view/handed_on.py): nobody in the module reads
them, so it goes global, and the functions that return it hand out its layouts. Any other use
of the result keeps the PM605 refusal. The fixture caller_result_handed_on runs the whole form."""

from __future__ import annotations

from transforms.global_view.contract_text import CONTRACT_NAMES
from transforms.pipeline import migrate_source

_SOURCE = b'''import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.pmap, axis_name="i", donate_argnums=(0,))
def step(w, x):
    return w + jax.lax.pmean(x, "i")


def main():
    n = jax.local_device_count()
    w = jax.device_put_replicated(jnp.zeros(3), jax.local_devices())
    w = step(w, np.ones((n, 3), np.float32))
    return {"w": w}


HOSTS
'''

_REFUSED = "returns values in the global layout to callers in this module"


def _migrate(hosts: bytes):
    result = migrate_source(_SOURCE.replace(b"HOSTS", hosts), style="global")
    text = result.source.decode()
    codes = {f.code for f in result.findings}
    is_global = "PM600" in codes and not any(name in text for name in CONTRACT_NAMES)
    return is_global, result


def _layouts(result) -> dict[str, list[str]]:
    return {f.function: [o.kind for o in f.outputs] for f in result.layouts}


def test_a_result_returned_as_is_leaves_through_the_function_that_returns_it():
    is_global, result = _migrate(b"def run():\n    return main()\n")
    assert is_global
    assert _layouts(result)["run"] == _layouts(result)["main"]


def test_a_chain_of_such_returns_and_a_dropped_result():
    is_global, result = _migrate(
        b"def inner():\n    return main()\n\n\ndef run():\n    return inner()\n\n\n"
        b"if __name__ == '__main__':\n    main()\n")
    assert is_global
    assert "run" in _layouts(result) and "inner" not in _layouts(result)


def test_a_result_read_in_the_module_is_refused():
    is_global, result = _migrate(b"def run():\n    return {'w': main()['w'][0]}\n")
    assert not is_global
    assert any(_REFUSED in f.message for f in result.findings)


def test_a_function_that_returns_something_else_too_is_refused():
    is_global, result = _migrate(
        b"def run(flag=True):\n    if flag:\n        return main()\n    return None\n")
    assert not is_global
    assert any(_REFUSED in f.message for f in result.findings)


def test_the_returning_function_read_in_the_module_must_accept_too():
    """`run` returns `main()` as is, but top-level code reads what `run` returns."""
    is_global, result = _migrate(b"def run():\n    return main()\n\n\nW = run()['w'][0]\n")
    assert not is_global
    assert any(_REFUSED in f.message for f in result.findings)


def test_a_result_returned_from_a_nested_def_is_refused():
    is_global, result = _migrate(
        b"def run():\n    def later():\n        return main()\n    return later\n")
    assert not is_global
