"""`jax.pmap(f, donate_argnums=0)`, the int form, still donates once migrated: run on 8 fake
CPU devices, the input a migrated call was given is deleted afterwards, in both styles.

faithful: the helper (`_pmap_style_shard_map(..., donate_argnums=0)`, whose template turns
the int into jit's tuple); global: the recognised program (`jax.jit(..., donate_argnums=0)`
around shard_map), and, with pmap's calling contract kept (PM612: jax.jit over
_per_device_shard_map), a program that reads a value pmap donated a copy of (PM610) and a
module with no caller. The
text snapshots (tests/fixtures/donate_int) show what is written; this shows it donates.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from transforms.pipeline import migrate_source

UPDATE = '''import jax
import jax.numpy as jnp
import numpy as np


def update(w, g):
    return w - 0.5 * jax.lax.pmean(g, "i")


p_update = jax.pmap(update, axis_name="i", donate_argnums=0)
'''
# Its caller in the module: the global style rewrites both.
PROGRAM = UPDATE + '''

def run():
    n = jax.local_device_count()
    g = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    w1 = p_update(np.ones((n, 3), np.float32), g)
    w2 = p_update(w1, g)
    return {"w1_deleted": w1.is_deleted(), "w2": np.asarray(w2)}
'''
# A value pmap donated a copy of (a stack on one device) read after the call: the global
# style keeps pmap's calling contract here (PM610, PM612), and the stack must survive.
FALLBACK = UPDATE + '''

def run():
    n = jax.local_device_count()
    g = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    w0 = jnp.stack([jnp.ones(3, jnp.float32)] * n)
    w1 = p_update(w0, g)
    w2 = p_update(w1, g)
    return {"w0_deleted": w0.is_deleted(), "w1_deleted": w1.is_deleted(), "w2": np.asarray(w2)}
'''
# The library (no caller here) is called with pmap's contract: a leading device axis.
DRIVER = '''
import jax
import numpy as np

import fallback
import library
import program

assert jax.device_count() == 8
result = program.run()
assert result["w1_deleted"] is True, "program: the donated input was not deleted"
result = fallback.run()
assert result["w1_deleted"] is True, "fallback: the donated input was not deleted"
assert result["w0_deleted"] is False, "fallback: pmap donates a copy of a stacked value"
w = np.ones((8, 3), np.float32)
g = np.arange(24, dtype=np.float32).reshape(8, 3)
w1 = library.p_update(w, g)
w2 = library.p_update(w1, g)
assert w1.is_deleted(), "library: the donated input was not deleted"
assert not w2.is_deleted()
np.testing.assert_allclose(np.asarray(w2), w - 2 * 0.5 * g.mean(axis=0))
print("donated")
'''


@pytest.mark.parametrize("style", ["faithful", "global"])
def test_an_int_donate_argnums_deletes_the_donated_input(tmp_path, style):
    helper = '_pmap_style_shard_map(update, axis_name="i", donate_argnums=0)'
    for name, source in (("program", PROGRAM), ("fallback", FALLBACK), ("library", UPDATE)):
        result = migrate_source(source.encode(), style=style)
        migrated = result.source.decode()
        assert "jax.pmap(update" not in migrated and "donate_argnums=0" in migrated
        assert (helper in migrated) == (style == "faithful"), name
        if style == "global" and name != "program":
            assert "PM612" in {finding.code for finding in result.findings}, name
        (tmp_path / f"{name}.py").write_text(migrated)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "donated"
