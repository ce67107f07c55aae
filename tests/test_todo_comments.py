"""Advice that outlives `apply`: a warning leaves `# TODO(pmap-migrate): CODE reason` above
its statement, and later runs report that comment (transforms/todo_comments.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

from transforms.pipeline import migrate_source
from transforms.todo_comments import MAX_LINE, todo_text

# brax's host barrier whose value is checked: PM504, the pmap migrated, the check left.
BARRIER = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp


    def synchronize_hosts():
        x = jnp.ones([jax.local_device_count()])
        x = jax.device_get(jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(x))
        assert x[0] == jax.device_count()
    ''').encode()
TODO = b"    # TODO(pmap-migrate): PM504 host barrier: use multihost_utils.sync_global_devices\n"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "migrator.cli", *map(str, args)],
                          cwd=ROOT, capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_apply_leaves_a_todo_that_scan_and_diff_keep_reporting(tmp_path):
    path = tmp_path / "barrier.py"
    path.write_bytes(BARRIER)
    before = cli("scan", path)
    assert before.returncode == 1 and b"PM504" in before.stdout + before.stderr
    assert cli("apply", path).returncode == 1  # a human is needed
    applied = path.read_bytes()
    assert TODO + b"    x = jax.device_get(_pmap_style_shard_map(" in applied
    for command in ("scan", "diff"):
        again = cli(command, path)
        output = (again.stdout + again.stderr).decode()
        assert again.returncode == 1, output
        line = applied[:applied.index(TODO)].count(b"\n") + 1
        assert f"barrier.py:{line}:5: PM504 warning host barrier: use " in output
        assert "1 need a human" in output
    assert cli("apply", path).returncode == 1
    assert path.read_bytes() == applied  # a second apply adds no second comment
    # Once a human removes the comment, nothing is left to report.
    path.write_bytes(applied.replace(TODO, b""))
    done = cli("diff", path)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def test_a_site_reported_again_is_reported_once_and_info_gets_no_todo():
    source = textwrap.dedent('''\
        import jax

        f = jax.pmap(lambda x: x, in_axes=-1)
        g = jax.pmap(lambda x: x)
        ''').encode()
    first = migrate_source(source)
    assert first.source.count(b"TODO(pmap-migrate)") == 1
    assert b"# TODO(pmap-migrate): PM201 negative axis: pmap site not migrated\nf = jax.pmap(" \
        in first.source
    second = migrate_source(first.source)
    assert second.source == first.source
    assert [f.code for f in second.findings] == ["PM201"]  # the site, not its TODO again


def test_a_todo_line_fits_in_99_characters():
    for indent in ("", " " * 8, " " * 40):
        for code in ("PM402", "PM504", "PM502"):
            line = todo_text(code, indent)
            assert len(line) <= MAX_LINE and line.startswith(f"{indent}# TODO(pmap-migrate): {code}")
    assert todo_text("PM504", "") == (
        "# TODO(pmap-migrate): PM504 host barrier: use multihost_utils.sync_global_devices")
