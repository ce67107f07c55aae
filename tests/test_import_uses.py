"""transforms/import_uses.py: whether a module still uses its module-level `import jax`, so that
an import the migration left unused is removed and no other is. A removal of a used import is
a NameError at run time; a kept unused one is only a linter's F401, so every doubt keeps it."""

from __future__ import annotations

import ast

import pytest

from transforms.import_uses import module_binding_used
from transforms.pipeline import migrate_source

USED = {
    "attribute at module level": "import jax\nx = jax.numpy.ones(3)\n",
    "decorator": "import jax\n@jax.jit\ndef f(x):\n    return x\n",
    "default argument": "import jax\ndef f(x, y=jax.numpy.ones(3)):\n    return x\n",
    "keyword-only default": "import jax\ndef f(*, y=jax.numpy.ones(3)):\n    return y\n",
    "annotation": "import jax\ndef f(x: jax.Array) -> None:\n    pass\n",
    "string annotation": "import jax\ndef f(x: 'jax.Array'):\n    pass\n",
    "variable annotation": "import jax\nx: 'jax.Array'\n",
    "in a function": "import jax\ndef f():\n    return jax.devices()\n",
    "in a lambda": "f = lambda: jax.devices()\nimport jax\n",
    "lambda default": "import jax\nf = lambda d=jax.devices(): d\n",
    "in a class body": "import jax\nclass A:\n    devices = jax.devices\n",
    "in a method": "import jax\nclass A:\n    def f(self):\n        return jax.devices()\n",
    "nested function of a shadowing one": (
        "import jax\ndef f(jax):\n    def g():\n        return jax\n    return g\n"
        "def h():\n    return jax.devices()\n"),
    "__all__": "import jax\n__all__ = ['jax']\n",
    "a doctest": "import jax\ndef f():\n    '''>>> jax.devices()'''\n",
    "global": "import jax\ndef f():\n    global jax\n    jax = None\n",
    "module-level rebinding": "import jax\njax = None\n",
    "del": "import jax\ndel jax\n",
}
UNUSED = {
    "nothing": "import jax\nx = 1\n",
    "a function's own import": "import jax\ndef f():\n    import jax\n    return jax.devices()\n",
    "a parameter": "import jax\ndef f(jax):\n    return jax.devices()\n",
    "a lambda parameter": "import jax\nf = lambda jax: jax.devices()\n",
    "a local assignment": "import jax\ndef f():\n    jax = object()\n    return jax\n",
    "an except name": (
        "import jax\ndef f():\n    try:\n        pass\n    except Exception as jax:\n"
        "        return jax\n"),
    "an attribute named so": "import jax\nx = object()\nx.jax = 1\n",
    "a plain string": "import jax\nx = 'jax is fast'\n",
}


@pytest.mark.parametrize("source", USED.values(), ids=USED)
def test_uses_keep_the_import(source):
    assert module_binding_used(ast.parse(source), "jax")


@pytest.mark.parametrize("source", UNUSED.values(), ids=UNUSED)
def test_what_is_not_a_use_of_the_module_binding(source):
    assert not module_binding_used(ast.parse(source), "jax")


def top_imports(source: bytes) -> list[str]:
    tree = ast.parse(source)
    return [ast.unparse(node) for node in tree.body if isinstance(node, ast.Import)]


def test_an_import_the_migration_left_unused_goes_an_alias_too():
    source = b"import jax as j, numpy as np\n\nstep = j.pmap(lambda x: x * 2)\n"
    out = migrate_source(source).source
    assert top_imports(out) == ["import numpy as np"]
    assert out.startswith(b"import numpy as np\n")


@pytest.mark.parametrize("source", [
    # used elsewhere after the rewrite
    b"import jax\n\n\n@jax.jit\ndef f(x):\n    return x\n\n\nstep = jax.pmap(f)\n",
    b"import jax\n\n\ndef f(x, y=jax.numpy.ones(3)):\n    return x\n\n\nstep = jax.pmap(f)\n",
    b"import jax\n\n\ndef f(x: 'jax.Array'):\n    return x\n\n\nstep = jax.pmap(f)\n",
    # the module never used it: not the migration's to remove
    b"import jax\nfrom jax import pmap\n\nstep = pmap(lambda x: x * 2)\n",
], ids=["decorator", "default", "string annotation", "unused before"])
def test_an_import_still_used_or_unused_before_stays(source):
    assert "import jax" in top_imports(migrate_source(source).source)


def test_a_removed_first_import_leaves_no_blank_lines_on_top():
    out = migrate_source(b"import jax\n\nstep = jax.pmap(lambda x: x * 2)\n").source
    assert out.startswith(b"# pmap-migrate: helper"), out[:80]
    out = migrate_source(b"from jax import pmap\n\nstep = pmap(lambda x: x * 2)\n").source
    assert out.startswith(b"# pmap-migrate: helper"), out[:80]


def test_a_comment_above_a_removed_import_is_kept_before_the_helper():
    """Was an internal error (PM005: 'HelperText' object has no attribute 'leading_lines')."""
    source = b"import os\n# pmap, for the step\nfrom jax import pmap\nstep = pmap(lambda x: x * 2)\n"
    migration = migrate_source(source)
    assert [f.code for f in migration.findings] == ["PM100"]
    out = migration.source.decode()
    assert out.startswith("import os\n# pmap, for the step\n")
    assert out.index("# pmap, for the step") < out.index("# pmap-migrate: helper")
    compile(out, "<migrated>", "exec")
