"""Tests that fake pmap (chex.fake_pmap, mock.patch("jax.pmap")) keep working after migration:
a module that patches jax.pmap keeps its pmaps in either style (PM211), and a module that
fakes the pmaps of others is told what changes (PM212). The chex suite itself is measured in
benchmarks/README.md."""

from __future__ import annotations

import textwrap

import pytest

from transforms.pipeline import migrate_source
from transforms.reading.names import ImportTable
from transforms.reading.pmap_patches import pmap_patch
from transforms.reading.prefilter import parse_or_none

SITE = "out = jax.pmap(lambda x: x + 1)(jnp.ones((2, 3)))\n"

PATCHES = {
    "chex_context": "import chex\nwith chex.fake_pmap():\n    pass\n",
    "chex_and_jit_imported": "from chex import fake_pmap_and_jit\nctx = fake_pmap_and_jit()\n",
    "chex_private_module": "from chex._src import fake\nctx = fake.fake_pmap()\n",
    "mock_patch": "from unittest import mock\np = mock.patch('jax.pmap', jax.vmap)\n",
    "mock_module_patch": "import mock\np = mock.patch('jax.pmap', jax.vmap)\n",
    "mock_patch_object": "from unittest import mock\np = mock.patch.object(jax, 'pmap', jax.vmap)\n",
    "monkeypatch_string": "def t(monkeypatch):\n    monkeypatch.setattr('jax.pmap', jax.vmap)\n",
    "monkeypatch_object": "def t(monkeypatch):\n    monkeypatch.setattr(jax, 'pmap', jax.vmap)\n",
    "builtin_setattr": "setattr(jax, 'pmap', jax.vmap)\n",
    "assignment": "jax.pmap = jax.vmap\n",
}

NOT_PATCHES = {
    "patch_of_jit": "from unittest import mock\np = mock.patch('jax.jit', jax.vmap)\n",
    "patch_object_of_jit": "from unittest import mock\np = mock.patch.object(jax, 'jit', f)\n",
    "setattr_other_object": "setattr(config, 'pmap', True)\n",
    "string_in_a_message": "print('jax.pmap is patched in tests')\n",
    "own_fake_pmap": "def fake_pmap():\n    return None\nfake_pmap()\n",
    "set_n_cpu_devices": "import chex\nchex.set_n_cpu_devices(8)\n",
}


def _module(body: str) -> bytes:
    return ("import jax\nimport jax.numpy as jnp\n" + body + SITE).encode()


def _patch_of(source: bytes):
    tree = parse_or_none(source)
    return pmap_patch(tree, ImportTable.from_tree(tree).imported)


@pytest.mark.parametrize("name", list(PATCHES))
def test_patch_is_found(name):
    assert _patch_of(_module(PATCHES[name])) is not None


@pytest.mark.parametrize("name", list(NOT_PATCHES))
def test_not_a_patch(name):
    assert _patch_of(_module(NOT_PATCHES[name])) is None


@pytest.mark.parametrize("style", ["faithful", "global"])
@pytest.mark.parametrize("name", list(PATCHES))
def test_patched_module_keeps_its_pmaps(name, style):
    source = _module(PATCHES[name])
    result = migrate_source(source, style=style)
    assert result.source == source
    assert [f.code for f in result.findings if f.line == source.count(b"\n")] == ["PM211"]


@pytest.mark.parametrize("style", ["faithful", "global"])
@pytest.mark.parametrize("name", list(NOT_PATCHES))
def test_unpatched_module_is_migrated(name, style):
    source = _module(NOT_PATCHES[name])
    result = migrate_source(source, style=style)
    assert SITE.encode() not in result.source
    codes = {f.code for f in result.findings}
    # Migrated: faithful (PM100), global (PM600), or on pmap's contract (PM612, the global
    # style's floor for a pmap called on the spot at module level).
    migrated = {"faithful": {"PM100"}, "global": {"PM600", "PM612"}}[style]
    assert codes & migrated and "PM211" not in codes


def test_fake_of_other_modules_pmaps_is_reported_once():
    source = textwrap.dedent("""\
        import chex
        from mylib import training

        def test_update():
            with chex.fake_pmap():
                training.step()
            with chex.fake_pmap_and_jit():
                training.step()
    """).encode()
    result = migrate_source(source)
    assert result.source == source
    assert [(f.code, f.line) for f in result.findings] == [("PM212", 5)]
    assert "set_n_cpu_devices" in result.findings[0].message


def test_fake_started_in_a_module_with_its_own_pmap_is_not_pm212():
    """setUp style: `fake.start()` there, the pmaps in the test methods of the same module."""
    body = "import chex\nfake = chex.fake_pmap()\nfake.start()\n"
    result = migrate_source(_module(body))
    assert "PM212" not in {f.code for f in result.findings}


def test_a_mock_patch_alone_is_not_pm212():
    """Only chex's fakes are named: a hand-written patch in a module without pmaps may patch
    anything and is not the tool's to judge."""
    source = b"from unittest import mock\np = mock.patch('jax.pmap', f)\n"
    assert migrate_source(source).findings == []


def test_fake_around_no_pmap_of_a_module_that_has_one_is_pm212():
    """jaxline's `disable_pmap_jit`: its own rendezvous pmap is kept (PM211, and no host
    barrier rewrite or PM504, which would say it is migrated), and the fake it
    puts around the user's experiment, whose pmaps live elsewhere, is reported (PM212)."""
    source = textwrap.dedent("""\
        import chex
        import jax
        import jax.numpy as jnp

        def rendezvous():
            x = jnp.ones([jax.local_device_count()])
            return jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(x)

        def disable_pmap_jit(fn):
            def wrapped(*args):
                with chex.fake_pmap_and_jit():
                    return fn(*args)
            return wrapped
    """).encode()
    result = migrate_source(source)
    assert result.source == source
    assert [(f.code, f.line) for f in result.findings] == [("PM211", 7), ("PM212", 11)]


def test_fake_around_own_pmap_in_a_with_block_is_not_pm212():
    source = textwrap.dedent("""\
        import chex
        import jax

        def helper(x):
            with chex.fake_pmap():
                return library_step(x)  # no pmap in this block...

        def test_own(x):
            with chex.fake_pmap():
                return jax.pmap(lambda v: v)(x)  # ...but here
    """).encode()
    findings = [(f.code, f.line) for f in migrate_source(source).findings]
    assert findings == [("PM212", 5), ("PM211", 10)]


def test_fake_around_a_call_of_a_module_function_that_pmaps_is_not_pm212():
    """chex's fake_test: `with fake.fake_pmap(): _assert_pmapped(foo, ...)`, a helper of the
    same module that calls jax.pmap."""
    source = textwrap.dedent("""\
        import chex
        import jax

        def _check(fn, x):
            return _run(fn, x)

        def _run(fn, x):
            return jax.pmap(fn)(x)

        def test_faked(x):
            with chex.fake_pmap():
                _check(abs, x)
    """).encode()
    assert "PM212" not in {f.code for f in migrate_source(source).findings}
