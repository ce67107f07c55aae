"""transforms/contract_names.py: what counts as pmap-contract code in migrated output, read
from the tokens, and the list of names kept in step with the code that writes them."""

from __future__ import annotations

import pytest

from transforms.contract_names import PMAP_CONTRACT_NAMES, is_fully_global, pmap_contract_code
from transforms.global_view.contract_text import CONTRACT_NAMES
from transforms.module_helpers import HELPER_ORDER


def test_the_names_are_every_contract_function_and_faithful_helper():
    assert set(PMAP_CONTRACT_NAMES) == set(CONTRACT_NAMES) | set(HELPER_ORDER)


@pytest.mark.parametrize("code, found", [
    ("f = jax.jit(_per_device_shard_map(g, 'i', in_specs=P('i'), out_specs=P('i')))\n",
     ["_per_device_shard_map"]),
    ("from pkg.helpers import _per_device_shard_map as _per_device_shard_map_2\n",
     ["_per_device_shard_map", "_per_device_shard_map_2"]),
    ("x = _device_put_sharded_12(xs, devices)\n", ["_device_put_sharded_12"]),
    ("f = jax.pmap(g)\n", ["jax.pmap"]),
    ("from jax import pmap\n", ["jax.pmap"]),
    ("@_pmap_compat\ndef f(x):\n    return _pmap_mesh(2, 'i')\n", ["_pmap_compat", "_pmap_mesh"]),
    ("%time y = jax.pmap(g)(x)\n", ["jax.pmap"]),  # IPython in a notebook cell
    ("s = 'unclosed\n_pmap_mesh(1)\n", ["_pmap_mesh"]),  # does not tokenize: words
])
def test_contract_code_is_found(code, found):
    assert pmap_contract_code(code) == found
    assert not is_fully_global(code.encode())


@pytest.mark.parametrize("code", [
    "f = jax.jit(jax.shard_map(g, mesh=_mesh('i'), in_specs=P(), out_specs=P()))\n",
    '"""Replaces _pmap_mesh and jax.pmap."""\n# _per_device_shard_map(...) was here\n',
    "_pmap_meshes = my.pmap(x) + myjax.pmap(y) + _pmap_mesh_x\n",  # other names
])
def test_global_code_and_mentions_in_strings_and_comments_are_fully_global(code):
    assert pmap_contract_code(code) == [] and is_fully_global(code)
