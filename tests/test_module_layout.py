"""Where the migration puts what it adds to a module: helpers and imports go after the
module's header (docstring, PEP 8's dunders, imports), never above `__all__` or the imports."""

from __future__ import annotations

import ast
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from transforms.pipeline import migrate_source

SOURCE = b'''"""Docstring."""

__all__ = ["train"]
__version__: str = "1.0"

import jax
import jax.numpy as jnp


def train(x):
    params = jax.device_put_replicated(jnp.ones(3), jax.local_devices())
    return jax.pmap(lambda p, b: p * b, axis_name="i")(params, x)
'''


def _top_level(source: bytes) -> list[str]:
    """A name for each top-level statement: the def's name, `import`, or the assigned name."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.append("import")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            names.append(target.id)
        else:
            names.append(type(node).__name__)
    return names


@pytest.mark.parametrize("style", ["faithful", "global"])
def test_helpers_go_after_the_imports_that_follow_module_dunders(style):
    result = migrate_source(SOURCE, style=style)
    order = _top_level(result.source)
    assert order[:3] == ["Expr", "__all__", "__version__"]
    last_import = max(i for i, name in enumerate(order) if name == "import")
    helpers = [i for i, name in enumerate(order) if name.startswith("_")
               and not name.startswith("__")]
    assert helpers and min(helpers) > last_import, order
    assert order[-1] == "train"


def test_a_dunder_that_calls_something_ends_the_header():
    source = SOURCE.replace(b'__version__: str = "1.0"', b'__version__ = version("pkg")')
    result = migrate_source(source)
    order = _top_level(result.source)
    # The helper must exist before any statement that could call it at import time runs.
    assert order.index("_device_put_replicated") < order.index("__version__")


def test_no_import_of_named_sharding_for_the_users_own_dotted_use():
    """chex's asserts_chexify_test: `jax.sharding.NamedSharding(...)` in the user's code and a
    site that keeps pmap's contract; nothing the migration writes names NamedSharding."""
    source = b'''import jax


def place(x, mesh):
    return jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def transform():
    return lambda fn: jax.pmap(fn, axis_name="i")
'''
    result = migrate_source(source, style="global")
    assert b"_per_device_shard_map" in result.source
    imported = [node for node in ast.parse(result.source).body
                if isinstance(node, ast.ImportFrom) and node.module == "jax.sharding"]
    assert imported and all(alias.name != "NamedSharding"
                            for node in imported for alias in node.names)


# Where a new import line goes: in the header's block of its kind, in the order that block
# keeps (isort's default, `import` lines before `from` lines; or Google's, sorted by module),
# never among relative imports; a helper module's import (the user's own package) last.
STEP = "\n\n@jax.pmap\ndef step(x):\n    return x\n\n\nstep(x)\n"
PLACEMENTS = {
    "isort's default: among the from lines, by module, any case": (
        "import warnings\n\nimport jax\nimport numpy as np\nfrom flax.jax_utils import unreplicate\n"
        "from packaging import version\nfrom PIL import Image\n\nfrom ...models import Model\n",
        ["import functools", "import warnings", "", "import jax", "import numpy as np",
         "from flax.jax_utils import unreplicate",
         "from jax.sharding import AxisType, PartitionSpec as P",
         "from packaging import version", "from PIL import Image", "",
         "from ...models import Model"]),
    "Google's: import and from lines sorted together": (
        "import jax\nfrom jax import lax\nimport jax.numpy as jnp\nimport numpy as np\n",
        ["import functools", "", "import jax", "from jax import lax", "import jax.numpy as jnp",
         "from jax.sharding import AxisType, PartitionSpec as P", "import numpy as np"]),
    "the block that holds its package": (
        "import numpy as np\n\nimport jax\nimport optax\n",
        ["import functools", "", "import numpy as np", "", "import jax", "import optax",
         "from jax.sharding import AxisType, PartitionSpec as P"]),
}


@pytest.mark.parametrize("header, expected", PLACEMENTS.values(), ids=PLACEMENTS)
def test_a_new_import_goes_where_isort_would_put_it(header, expected):
    source = (header + STEP).encode()
    out = migrate_source(source, style="global").source.decode()
    assert out.splitlines()[:len(expected)] == expected
    assert migrate_source(out.encode(), style="global").source.decode() == out


def test_a_standard_library_import_opens_its_own_block_above_the_others():
    source = (b'"""Doc."""\nimport jax\nimport numpy as np\n\n\n'
              b'@jax.pmap\n@jax.pmap\ndef f(x):\n    return x\n')
    out = migrate_source(source).source.decode()  # (nested pmap: its helper uses functools)
    assert out.splitlines()[:4] == ['"""Doc."""', "import functools", "", "import numpy as np"]


def test_a_helper_module_import_comes_after_the_others():
    source = b"import jax\nimport numpy as np\n\nstep = jax.pmap(lambda x: x, in_axes=(0,))\n"
    out = migrate_source(source, helper_module="mypkg.helpers").source.decode()
    assert out.splitlines()[:3] == ["import numpy as np",
                                    "from jax.sharding import PartitionSpec as P",
                                    "from mypkg.helpers import _pmap_style_shard_map"]


# Any header of imports, in any order and grouping, with pmap sites of either style below: the
# migrated module parses, keeps every import the user wrote that it still uses, adds each new
# import once, and a second run changes nothing.
IMPORT_LINES = [
    "import functools", "import os", "from typing import Any", "import jax",
    "import jax.numpy as jnp", "from jax import lax", "import numpy as np",
    "from flax import jax_utils", "import optax", "from PIL import Image",
    "from jax.sharding import Mesh", "from . import sibling", "from .models import Model",
]
SITES = ("\n\n@jax.pmap\ndef step(x):\n    return x + 1\n\n\n"
         "def run(x):\n    return step(x), Any, os, np, jnp, lax, Mesh\n")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(lines=st.lists(st.sampled_from(IMPORT_LINES), min_size=1, max_size=9, unique=True),
       blanks=st.lists(st.booleans(), min_size=9, max_size=9),
       style=st.sampled_from(["faithful", "global"]))
def test_any_import_header_stays_sound(lines, blanks, style):
    if "import jax" not in lines:
        lines = [*lines, "import jax"]
    header = "".join(line + ("\n\n" if blank else "\n") for line, blank in zip(lines, blanks))
    source = (header + SITES).encode()
    out = migrate_source(source, style=style).source
    tree = ast.parse(out)
    bound = {(a.asname or a.name.split(".")[0]) if isinstance(n, ast.Import) else (a.asname or a.name)
             for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    for line in lines:
        name = line.split()[-1].split(".")[0]
        if name in {"Any", "os", "np", "jnp", "lax", "Mesh"}:  # what run() still reads
            assert name in bound, (line, out.decode()[:600])
    kinds = [isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body]
    assert kinds == sorted(kinds, reverse=True), out.decode()[:600]  # every import on top
    counted = Counter(ast.unparse(n) for n in tree.body
                      if isinstance(n, (ast.Import, ast.ImportFrom)))
    assert max(counted.values()) == 1, counted
    assert migrate_source(out, style=style).source == out


@pytest.mark.parametrize("source, quote", [
    (b"x = 'a'\ny = 'b'\nz = \"c\"\n", "'"),
    (b'"""Doc."""\nx = "a"\n', '"'),
    (b"'''Doc.'''\nx = 1\n", '"'),  # docstrings do not count; none: double
    (b"x = r'a'\ny = u'b'\nz = \"c\"\n", "'"),
    (b"x = 'a'\ny = \"b\"\n", '"'),  # as many of each: double
])
def test_the_global_style_writes_the_quotes_most_one_line_literals_use(source, quote):
    from transforms.global_view.values import module_quote
    assert module_quote(ast.parse(source), source) == quote


@pytest.mark.parametrize("source, unit", [
    (b"def f():\n  return 1\n", "  "),
    (b"x = 1\nclass A:\n    pass\n", "    "),
    (b"if x: y()\ndef f():\n\treturn 1\n", "\t"),
    (b"x = 1\n", "    "),
])
def test_the_global_style_indents_its_defs_as_the_module_does(source, unit):
    from transforms.global_view.step_text import indent_unit
    assert indent_unit(ast.parse(source), source.decode().splitlines()) == unit
