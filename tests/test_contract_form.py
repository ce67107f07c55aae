"""The global style's floor, pmap's calling contract without the helper (contract.py,
contract_text.py): the text each module gets for the features its sites use, pmap's devices=,
multi-process modules, and where the functions go. Two-process runs of the multi-process form
are corpus programs (`multiproc_*`), checked by .ci/run against the legacy pmap."""

from __future__ import annotations

import ast
import textwrap

import pytest

from transforms.global_view.contract_text import contract_functions_text
from transforms.pipeline import migrate_source

VARIANTS = [frozenset(), frozenset({"devices"}), frozenset({"multiprocess"}),
            frozenset({"devices", "multiprocess"})]


@pytest.mark.parametrize("features", VARIANTS, ids=lambda f: "+".join(sorted(f)) or "plain")
def test_each_variant_is_python_a_reader_can_keep(features):
    text = contract_functions_text(features, functools="functools", jax="jax")
    tree = ast.parse(text)
    defined = {n.name for n in tree.body}
    assert {"_pmap_mesh", "_per_device_shard_map"} <= defined
    assert ("_across_processes" in defined) == ("multiprocess" in features)
    assert ("multihost_utils" in text) == ("multiprocess" in features)
    assert ("devices=None" in text) == ("devices" in features)
    assert max(len(line) for line in text.splitlines()) <= 99
    assert "# pmap-migrate" not in text


def _global(source: str):
    result = migrate_source(textwrap.dedent(source).encode(), style="global")
    return result.source.decode(), {f.code: f.message for f in result.findings}


def test_devices_are_kept_as_the_mesh():
    text, findings = _global("""\
        import jax


        def rms(x):
            return jax.lax.pmean(x * x, "i")


        def make(devices):
            return jax.pmap(rms, axis_name="i", devices=devices)
        """)
    assert "devices=tuple(devices)" in text
    assert "def _pmap_mesh(size, axis_name, devices=None):" in text
    assert findings["PM612"].startswith("kept pmap's calling convention: ")


def test_devices_that_default_to_none_stay_faithful_and_say_why():
    text, findings = _global("""\
        import jax


        def rms(x):
            return jax.lax.pmean(x * x, "i")


        def make(devices=None):
            return jax.pmap(rms, axis_name="i", devices=devices)
        """)
    assert "PM612" not in findings and "_pmap_style_shard_map" in text
    # the factory is called nowhere in this module (PM603 says so first), and the floor names
    # why it cannot take the site
    assert "devices= is a parameter that defaults to None" in findings["PM603"]


def test_module_level_contract_sites_come_after_the_functions_they_call():
    """`p = jax.jit(_per_device_shard_map(...))` runs at import: the function must exist."""
    text, findings = _global('''\
        """Utilities."""
        import jax

        pmap_mean = jax.pmap(lambda x: jax.lax.pmean(x, "i"), axis_name="i")


        def helper():
            return 1
        ''')
    assert "PM612" in findings
    assert text.index("def _per_device_shard_map(") < text.index("pmap_mean = jax.jit(")
    assert text.startswith('"""Utilities."""\nimport functools\n')


def test_a_multiprocess_module_gets_the_host_local_form():
    text, findings = _global("""\
        import jax

        pmap_sum = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")


        def hosts():
            return jax.process_count()
        """)
    assert "pmap_sum = _across_processes(" in text
    assert "from jax.experimental import multihost_utils" in text
    assert findings["PM612"].startswith("kept pmap's calling convention: ")


def test_a_multi_line_function_moves_with_its_continuation_lines_unless_a_string_spans_them():
    from transforms.global_view.step_text import shifted as _shifted

    text = "functools.partial(\n    f, a=1,\n    b=2)"
    assert _shifted(text, 8) == "functools.partial(\n            f, a=1,\n            b=2)"
    assert _shifted(text, -2) == "functools.partial(\n  f, a=1,\n  b=2)"
    assert _shifted(text, -9) == "functools.partial(\nf, a=1,\nb=2)"  # never into the code
    spanning = 'partial(f, doc="""a\n    b""")'
    assert _shifted(spanning, 4) == spanning
