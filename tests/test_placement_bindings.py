"""Which names a multi-process caller converts once, where they are bound
(transforms/global_view/placement_bindings.py): the syntax side. The fixture pair
tests/fixtures_global/multiprocess_convert_once shows the rewrite, and its runs (one process in
test_global_view.py, two in test_multiprocess_check.py) show it computes the same."""

from __future__ import annotations

import ast
import textwrap

import pytest

from transforms.global_view.placement_bindings import placement_bindings

HEADER = "import numpy as np\nimport jax\n\n\ndef batches(n):\n    return []\n\n\n"


def _names(body: str) -> set[str]:
    module = ast.parse(HEADER + "def run(n):\n" + textwrap.indent(textwrap.dedent(body), "    "))
    function = module.body[-1]
    return set(placement_bindings(function, module))


def test_a_value_read_only_by_calls_moves_to_its_binding():
    assert _names("""
        params = {"w": np.zeros(3)}
        for _ in range(n):
            step(params, 1)
    """) == {"params"}
    assert _names("""
        for batch in batches(n):
            step(1, *batch)
            other(1, *batch)
    """) == {"batch"}


@pytest.mark.parametrize("body", [
    # read once, outside any loop: nothing to save
    "params = {'w': np.zeros(3)}\nstep(params)\n",
    # read by host code too
    "params = np.zeros(3)\nstep(params)\nstep(params)\nprint(params.sum())\n",
    # bound twice
    "params = np.zeros(3)\nstep(params)\nparams = np.ones(3)\nstep(params)\n",
    # an alias of another value, which could change in between
    "params = other.params\nstep(params)\nstep(params)\n",
    # built from `v`, changed in place between the calls
    "v = np.ones(3)\nu = np.asarray(v)\nstep(u)\nv[0] = 5.0\nstep(u)\n",
    "v = np.ones(3)\nu = [v]\nstep(u)\nv += 1\nstep(u)\n",
    "v = np.ones(3)\nu = [v]\nstep(u)\nnp.copyto(v, 2.0)\nstep(u)\n",
    # built from a module-level array other code may change
    "u = [TABLE]\nstep(u)\nstep(u)\n",
    # a parameter
    "step(n)\nstep(n)\n",
    # in a loop's body, read only under a condition: the loop may run a process's own count
    "for batch in batches:\n    if batch is not None:\n        step(batch)\n        step(batch)\n",
    # read in a nested function
    "params = np.zeros(3)\nf = lambda: step(params)\nstep(params)\n",
])
def test_what_stays_converted_at_each_call(body):
    assert _names(body) == set()
