"""`try: import jax.numpy as jnp` / `except ImportError: ...` at a module's top: under JAX the
import always succeeds, so the module is migrated exactly as one with the plain import
(transforms/reading/names.py reads the try's imports as the module's; transforms/imports.py
adds no second import of a name the try binds). A try whose other imports may fail keeps its
fallback in view."""

from __future__ import annotations

import pytest

from transforms.pipeline import migrate_source
from transforms.reading.names import ImportTable

BODY = '''

@jax.pmap
def f(x):
    return jnp.sin(x)


def run():
    y = jnp.ones((jax.local_device_count(), 3))
    return f(y)
'''
PLAIN = "import jax\nimport jax.numpy as jnp\n"
FALLBACKS = ["jnp = None", "import numpy as jnp", "pass"]


def _try_form(fallback: str, extra: str = "") -> str:
    return f"import jax\n\ntry:\n    import jax.numpy as jnp\n{extra}except ImportError:\n    {fallback}\n"


@pytest.mark.parametrize("style", ["faithful", "global"])
@pytest.mark.parametrize("fallback", FALLBACKS)
def test_a_try_import_migrates_like_a_plain_one(style, fallback):
    head = _try_form(fallback)
    plain = migrate_source((PLAIN + BODY).encode(), style=style)
    tried = migrate_source((head + BODY).encode(), style=style)
    assert [f.code for f in tried.findings] == [f.code for f in plain.findings]
    assert ("PM600" if style == "global" else "PM100") in [f.code for f in tried.findings]
    # The try block kept as it was, jnp imported nowhere else, and the same code below.
    code, plain_code = tried.source.decode(), plain.source.decode()
    block = head.split("\n", 1)[1]
    assert code.count(block) == 1 and code.count("import jax.numpy as jnp") == 1
    rest = code.split(block)[1].lstrip("\n")
    assert "def f(" in rest and plain_code.endswith("\n\n\n" + rest)


def test_the_import_table_reads_the_try_and_not_its_never_run_fallback():
    table = ImportTable.from_source(_try_form("jnp = None").encode())
    assert table.imported["jnp"] == "jax.numpy" and not table.ambiguous


@pytest.mark.parametrize("extra", [
    "    import optional_dependency\n",  # may be missing: then the fallback runs
    "    from jax.experimental import maps\n",  # gone from newer JAX
])
def test_a_try_whose_imports_may_fail_keeps_its_fallback_in_view(extra):
    source = _try_form("jnp = None", extra) + BODY
    assert ImportTable.from_source(source.encode()).ambiguous
    result = migrate_source(source.encode(), style="global")
    assert "PM600" not in [f.code for f in result.findings]


def test_a_relocated_api_imported_with_a_fallback_is_one_binding():
    """kfac-jax's `_axis_names()`: `from jax.extend.core import f as names`, falling back to
    `from jax.core import f as names` inside a function, is one binding of `names` (the try
    block's), so the module's imports are not ambiguous and its pmap can go global. A
    fallback to another module under the same name (`import numpy as jnp`) still is."""
    helper = '''
def _axis_names():
    try:
        from jax.extend.core import unsafe_get_axis_names_DO_NOT_USE as names
    except ImportError:
        from jax.core import unsafe_get_axis_names_DO_NOT_USE as names
    return names()
'''
    source = (PLAIN + helper + BODY).encode()
    table = ImportTable.from_source(source)
    assert not table.ambiguous
    assert table.imported["names"] == "jax.extend.core.unsafe_get_axis_names_DO_NOT_USE"
    assert "PM600" in [f.code for f in migrate_source(source, style="global").findings]
    other = helper.replace("from jax.core import unsafe_get_axis_names_DO_NOT_USE as names",
                           "from mylib import other_function as names")
    assert ImportTable.from_source((PLAIN + other + BODY).encode()).ambiguous
    numpy = "import jax\n\ndef f():\n    try:\n        import jax.numpy as jnp\n" \
            "    except ImportError:\n        import numpy as jnp\n    return jnp\n"
    assert ImportTable.from_source(numpy.encode()).ambiguous
