"""CRLF files stay CRLF where the migration wraps the long lines it writes
(transforms/line_wrap.py): every line of the result, the wrapped ones included, ends with
CRLF, in the pipeline and through `apply`."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

from transforms.pipeline import migrate_source

# The decorator the migration writes is longer than the line limit: it is wrapped.
LONG = b'''import functools

import jax


@functools.partial(jax.pmap, axis_name="data_parallel_axis", in_axes=(None, 0, 0, None), static_broadcasted_argnums=(3,))
def step(w, x, y, flag):
    return w
'''.replace(b"\n", b"\r\n")
WRAPPED = (b'@functools.partial(\r\n    _pmap_style_shard_map,\r\n'
           b'    axis_name="data_parallel_axis",\r\n')


def assert_all_crlf(data: bytes) -> None:
    lines = data.splitlines(keepends=True)
    assert lines and all(line.endswith(b"\r\n") for line in lines), [
        line for line in lines if not line.endswith(b"\r\n")][:3]
    assert data.count(b"\n") == data.count(b"\r\n")  # no lone LF
    assert b"\r\r" not in data


def test_wrapped_lines_of_a_crlf_file_end_with_crlf():
    migrated = migrate_source(LONG).source
    assert WRAPPED in migrated  # the migration did wrap
    assert_all_crlf(migrated)


def test_apply_keeps_crlf_on_wrapped_lines(tmp_path):
    (tmp_path / "step.py").write_bytes(LONG)
    done = subprocess.run([sys.executable, "-m", "migrator.cli", "apply", "step.py"],
                          cwd=tmp_path, capture_output=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    migrated = (tmp_path / "step.py").read_bytes()
    assert WRAPPED in migrated
    assert_all_crlf(migrated)
