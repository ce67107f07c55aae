"""`--style global` on nested pmaps (transforms/global_view/nested_sites.py): which go global
over a 2-D mesh, and the PM602 reason of each one that keeps pmap's contract."""

from __future__ import annotations

import ast
import textwrap

from transforms.faithful.multiprocess import process_read_reaching
from transforms.pipeline import migrate_source
from transforms.reading.names import ImportTable


def _global(source: str):
    result = migrate_source(textwrap.dedent(source).encode(), style="global")
    return result.source.decode(), [(f.line, f.code, f.message) for f in result.findings]


_STEP = """\
    import functools

    import jax


    @functools.partial(jax.pmap, axis_name="i"{outer})
    @functools.partial(jax.pmap, axis_name="j")
    def step({params}):
        return jax.lax.psum(a, ("i", "j"))
    """


def test_default_axes_take_keywords_other_axes_are_positional_only():
    """pmap maps a keyword argument on axis 0 whatever in_axes says: with in_axes other than 0
    the step refuses keywords rather than split them another way."""
    code, findings = _global(_STEP.format(outer="", params="a, b"))
    assert "def step(a, b):" in code and "jax.pmap" not in code
    assert [c for _, c, _ in findings] == ["PM600"]
    code, findings = _global(_STEP.format(outer=", in_axes=(0, None)", params="a, b"))
    assert "def step(a, b, /):" in code
    assert "in_specs=(P(\"i\", \"j\"), P(\"j\"))" in code.replace("\n", "").replace("        ", "")


def test_unknown_shape_keeps_the_contract_with_its_reason():
    for params, outer, reason in (
            ("*a", "", "the function has `*a`"),
            ("a, b=1", "", "the function has a default"),
            ("a", ", in_axes=None", "no argument is mapped by the outer level")):
        code, findings = _global(_STEP.format(outer=outer, params=params))
        assert "_nested_pmap_shard_map" in code
        pm602 = [m for _, c, m in findings if c == "PM602"]
        assert len(pm602) == 1 and reason in pm602[0], (params, findings)


def test_process_reads_reach_a_site_through_callers_and_what_they_call():
    tree = ast.parse(textwrap.dedent("""\
        import jax
        def host():
            return jax.process_index()
        def site(x):
            return x
        def caller(x):
            return site(x) + helper()
        def helper():
            return host()
        def other():
            return jax.process_count()
        """))
    imported = ImportTable.from_tree(tree).imported
    assert process_read_reaching(tree, imported, 4) == (3, "jax.process_index")
    assert process_read_reaching(tree, imported, 10) == (11, "jax.process_count")
    tree.body = [s for s in tree.body if getattr(s, "name", "") != "helper"]
    assert process_read_reaching(tree, imported, 4) is None
