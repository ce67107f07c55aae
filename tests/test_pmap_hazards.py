"""The pmap hazard rules: jax_pmap_shmap_merge folding, axis_index_groups, host barriers and
multi-process modules (transforms/faithful/config_flags.py, collective_groups.py, host_barriers.py,
multiprocess.py). Whole-file behaviour is in tests/fixtures/hazard_*; these pin the edges."""

from __future__ import annotations

import textwrap

from transforms.helpers.multiprocess_helper import multiprocess_helper_source
from transforms.pipeline import migrate_source
from transforms.helpers.runtime_helper import helper_source
from transforms.target import DEFAULT_TARGET, TargetJax


def migrate(source: str):
    result = migrate_source(textwrap.dedent(source).encode())
    return result.source.decode(), [(f.line, f.code) for f in result.findings], result


def body_after_helper(code: str) -> str:
    """The module without the inserted helper (everything after its `return call`)."""
    marker = "    return call\n"
    return code.split(marker, 1)[1].lstrip("\n") if marker in code else code


# -- jax_pmap_shmap_merge ------------------------------------------------------------------


def test_flag_test_keeps_new_pmap_branch_and_dedents():
    code, findings, _ = migrate("""\
        import jax

        def f(x):
            # why
            if jax.config.jax_pmap_shmap_merge:
                y = x
                for i in range(2):
                    y = y + i
            else:
                y = -x
            return y
        """)
    assert "    # why\n    y = x\n    for i in range(2):\n        y = y + i\n    return y" in code
    assert findings == [(5, "PM305")]


def test_negated_test_keeps_else_and_elif_becomes_if():
    code, _, _ = migrate("""\
        import jax

        def f(x, a):
            if not jax.config.jax_pmap_shmap_merge:
                y = 1
            elif a:
                y = 2
            else:
                y = 3
            return y
        """)
    assert "    if a:\n        y = 2\n    else:\n        y = 3\n" in code


def test_update_only_statement_of_block_leaves_pass():
    code, findings, _ = migrate("""\
        import jax

        def opt_out():
            jax.config.update("jax_pmap_shmap_merge", False)
        """)
    assert "def opt_out():\n    pass\n" in code
    assert findings == [(4, "PM305")]


def test_guarded_update_disappears_entirely():
    code, _, _ = migrate("""\
        import jax
        if hasattr(jax.config, "jax_pmap_shmap_merge"):
            jax.config.update("jax_pmap_shmap_merge", False)
        x = 1
        """)
    assert code == "x = 1\n"  # (and `import jax`, whose one use it was)


def test_partial_fold_keeps_the_rest_of_the_test():
    code, _, _ = migrate("""\
        import jax
        if hasattr(jax.config, "jax_pmap_shmap_merge") and fast:
            go()
        """)
    assert code == "if fast:\n    go()\n"  # (`import jax` went with it)


def test_unfoldable_references_are_reported_not_rewritten():
    source = """\
        import jax
        MERGED = jax.config.jax_pmap_shmap_merge
        print(getattr(jax.config, "jax_pmap_shmap_merge", None) is None)
        """
    code, findings, _ = migrate(source)
    assert code == textwrap.dedent(source)
    assert findings == [(2, "PM306"), (3, "PM306")]


def test_prose_about_the_flag_is_not_reported():
    _, findings, _ = migrate('"""We used to set jax_pmap_shmap_merge here."""\nimport jax\n')
    assert findings == []


def test_suppressed_fold_changes_nothing():
    source = """\
        import jax
        if jax.config.jax_pmap_shmap_merge:  # pmap-migrate: ignore[PM305]
            a = 1
        else:
            a = 2
        """
    code, findings, _ = migrate(source)
    assert code == textwrap.dedent(source)
    assert [c for _, c in findings] == ["PM011"]


# -- axis_index_groups -----------------------------------------------------------------------


GROUPED = """\
    import jax

    def body(x):
        a = jax.lax.psum(x, "i", axis_index_groups=[[0, 1], [2, 3]])
        b = jax.lax.all_gather(x, "i", axis_index_groups=[[0], [1, 2, 3]])
        c = jax.lax.psum_scatter(x, "i", axis_index_groups=GROUPS)
        return a, b, c
    """


def test_groups_reported_with_reason_in_pmap_modules():
    _, findings, result = migrate(GROUPED + "p = jax.pmap(body, 'i')\n")
    assert findings[:3] == [(4, "PM501"), (5, "PM502"), (6, "PM502")]
    messages = [f.message for f in result.findings]
    assert "fails to lower on every backend" in messages[1]
    assert "cannot be checked" in messages[2]


def test_groups_are_quiet_without_pmap():
    # A migrated module (no pmap left) runs clean a second time.
    _, findings, _ = migrate(GROUPED)
    assert findings == []


# -- host barriers ---------------------------------------------------------------------------


def test_discarded_barrier_rewritten_and_line_numbers_kept():
    code, findings, _ = migrate("""\
        import jax
        import jax.numpy as jnp

        def sync():
            jax.pmap(
                lambda x: jax.lax.psum(x, "i"), "i"
            )(jnp.ones(jax.local_device_count())).block_until_ready()

        step = jax.pmap(lambda x: x, "i")
        """)
    assert "from jax.experimental import multihost_utils\n" in code
    assert 'multihost_utils.sync_global_devices(\n        "sync",\n    )\n' in code
    # The later site is reported on its own input line, after a 3-line barrier.
    assert findings == [(5, "PM503"), (9, "PM100")]
    assert "jax.pmap(" not in body_after_helper(code)


def test_barrier_whose_value_is_used_is_reported_and_migrated():
    code, findings, _ = migrate("""\
        import jax
        import jax.numpy as jnp

        def synchronize_hosts():
            x = jnp.ones([jax.local_device_count()])
            x = jax.device_get(jax.pmap(lambda x: jax.lax.psum(x, 'i'), 'i')(x))
            assert x[0] == jax.device_count()
        """)
    assert sorted(findings) == [(6, "PM100"), (6, "PM504")]
    body = body_after_helper(code)
    # Not rewritten; the migrated code says what a human must do (transforms/todo_comments.py).
    todo = "    # TODO(pmap-migrate): PM504 host barrier: use multihost_utils.sync_global_devices\n"
    assert todo + "    x = jax.device_get(" in body
    assert "sync_global_devices" not in body.replace(todo, "")


def test_psum_over_another_axis_is_not_a_barrier():
    _, findings, _ = migrate("""\
        import jax
        import jax.numpy as jnp
        jax.pmap(lambda x: jax.lax.psum(x, "j"), "i")(jnp.ones(jax.local_device_count()))
        jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(jnp.ones(8))
        """)
    assert findings == [(3, "PM100"), (4, "PM100")]


# -- multi-process modules ---------------------------------------------------------------------


def test_multiprocess_module_gets_the_multiprocess_helper():
    source = """\
        import functools
        import jax

        @functools.partial(jax.pmap, axis_name="i")
        def step(x):
            return jax.lax.psum(x, "i")

        @jax.pmap
        def double(x):
            return 2 * x

        def main():
            if jax.process_index() == 0:
                print("host 0")
        """
    code, findings, result = migrate(source)
    assert findings == [(4, "PM100"), (8, "PM100"), (13, "PM506")]  # the process-0 block
    assert "multi-process (`jax.process_index`, line 13)" in result.findings[0].message
    assert helper_source(DEFAULT_TARGET, frozenset({"multiprocess", "devices"})) in code
    assert "host_local_array_to_global_array" in code
    assert "@functools.partial(_pmap_style_shard_map, axis_name=\"i\")" in code


def test_single_process_module_keeps_the_single_process_helper_byte_for_byte():
    code, findings, _ = migrate("""\
        import jax
        f = jax.pmap(lambda x: x)
        """)
    assert findings == [(2, "PM100")]
    assert helper_source(DEFAULT_TARGET, frozenset()) in code  # no feature: the short one
    assert "multihost_utils" not in code


def test_old_target_multiprocess_helper_uses_experimental_shard_map():
    text = multiprocess_helper_source(TargetJax.parse("0.4.38"))
    assert "from jax.experimental.shard_map import shard_map" in text
    assert "check_rep=False" in text and "    check_vma=False,\n" not in text
    compile(text, "helper", "exec")


def test_nested_pmap_in_multiprocess_module_stays_pmap_with_its_reason():
    code, findings, result = migrate("""\
        import jax
        f = jax.pmap(jax.pmap(lambda x: x, "j"), "i")
        n = jax.process_count()
        """)
    assert findings == [(2, "PM505")]
    assert "nested pmap in a multi-process module" in result.findings[0].message
    assert "jax.pmap(jax.pmap(" in code


def test_nested_pmap_is_judged_at_its_own_site():
    """PM505 judges the site: a process read in a function that does not reach the nested
    pmap leaves it to the 2-D helper; a caller that reads one, or calls a helper that does,
    keeps it as jax.pmap (issue 41 item 5)."""
    template = """\
        import jax
        grid = jax.pmap(jax.pmap(lambda x: jax.lax.psum(x, "j"), "j"), "i")

        def offset():
            return jax.process_index()

        def step(x):
            return grid(x{tail})

        def report():
            return offset()
        """
    code, findings, _ = migrate(template.format(tail=""))
    assert (2, "PM100") in findings and not any(c == "PM505" for _, c in findings)
    assert "_nested_pmap_shard_map(" in code and "jax.pmap(" not in code.split("grid =")[1]
    code, findings, _ = migrate(template.format(tail=" + offset()"))
    assert (2, "PM505") in findings
    assert 'grid = jax.pmap(jax.pmap(' in code


def test_evidence_resolved_through_imports():
    source = """\
        import jax as j
        from jax.experimental import multihost_utils as mh
        f = j.pmap(lambda x: x)
        y = mh.process_allgather(1)
        """
    _, findings, result = migrate(source)
    assert findings == [(3, "PM100")]
    assert "(`mh.process_allgather`, line 4)" in result.findings[0].message


def test_sync_global_devices_alone_is_not_multiprocess():
    _, findings, _ = migrate("""\
        import jax
        from jax.experimental import multihost_utils
        f = jax.pmap(lambda x: x)
        multihost_utils.sync_global_devices("done")
        """)
    assert findings == [(3, "PM100")]


def test_a_local_name_is_not_evidence():
    _, findings, _ = migrate("""\
        import jax
        f = jax.pmap(lambda x: x)
        process_index = 3
        """)
    assert findings == [(2, "PM100")]


def test_fixture_outputs_are_stable():
    # A second run over a migrated hazard module changes nothing.
    for source in (GROUPED + "p = jax.pmap(body, 'i')\n",):
        once, _, _ = migrate(source)
        twice = migrate_source(once.encode())
        assert twice.source.decode() == once
