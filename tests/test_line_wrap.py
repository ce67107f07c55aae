"""Long lines the migration writes are wrapped as a formatter would (transforms/line_wrap.py):
only whitespace (and brackets around a bare tuple) change, lines of the original and of the
helper templates are left alone, and a second pass changes nothing."""

from __future__ import annotations

import ast
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.line_wrap import LINE_LIMIT, wrap_long_lines
from transforms.pipeline import migrate_source


def _wrap(text: str, original: str = "") -> str:
    return wrap_long_lines(textwrap.dedent(text).encode(), original.encode()).decode()


def test_a_call_whose_arguments_fit_on_one_line_gets_them_on_their_own_line():
    text = _wrap('''
        def f():
            self.state = jax.device_put(jax.tree.map(jnp.copy, state), NamedSharding(_mesh("batch_axis"), P()))
    ''')
    assert text == textwrap.dedent('''
        def f():
            self.state = jax.device_put(
                jax.tree.map(jnp.copy, state), NamedSharding(_mesh("batch_axis"), P())
            )
    ''')


def test_arguments_that_do_not_fit_go_one_per_line_with_a_trailing_comma():
    text = _wrap('''
        w_sgd, _, loss_sgd = p_sgd(jax.device_put(jnp.zeros((2,)), NamedSharding(mesh, P())), jax.device_put(jnp.zeros((2,)), NamedSharding(mesh, P())), x, y)
    ''')
    assert text == textwrap.dedent('''
        w_sgd, _, loss_sgd = p_sgd(
            jax.device_put(jnp.zeros((2,)), NamedSharding(mesh, P())),
            jax.device_put(jnp.zeros((2,)), NamedSharding(mesh, P())),
            x,
            y,
        )
    ''')


def test_a_bare_tuple_is_bracketed_and_a_trailing_index_is_not_where_it_splits():
    text = _wrap('''
        def f():
            return jax.device_put(jnp.zeros((features,)), NamedSharding(_mesh("i"), P())), jax.device_put(jnp.ones(()), NamedSharding(_mesh("i"), P()))
            assert _across_processes(_per_device_shard_map(check, "i", in_specs=P("i"), out_specs=P("i")))(tree)[0], debug
    ''')
    assert text == textwrap.dedent('''
        def f():
            return (
                jax.device_put(jnp.zeros((features,)), NamedSharding(_mesh("i"), P())),
                jax.device_put(jnp.ones(()), NamedSharding(_mesh("i"), P())),
            )
            assert _across_processes(
                _per_device_shard_map(check, "i", in_specs=P("i"), out_specs=P("i"))
            )(tree)[0], debug
    ''')


def test_comprehensions_split_at_their_clauses_and_lines_inside_brackets_at_their_commas():
    text = _wrap('''
        y = {k: jax.device_put(value_of_the_key, NamedSharding(mesh, P())) for k, value_of_the_key in tree.items() if k}
        x = f(
            paths, 0.005 * jax.device_put(jnp.ones(()), NamedSharding(mesh, P())), steps * jax.device_put(jnp.ones(()), NamedSharding(mesh, P()))
        )
    ''')
    assert text == textwrap.dedent('''
        y = {
            k: jax.device_put(value_of_the_key, NamedSharding(mesh, P()))
            for k, value_of_the_key in tree.items()
            if k
        }
        x = f(
            paths,
            0.005 * jax.device_put(jnp.ones(()), NamedSharding(mesh, P())),
            steps * jax.device_put(jnp.ones(()), NamedSharding(mesh, P()))
        )
    ''')


def test_lines_of_the_original_comments_and_lambdas_are_left_alone():
    long_line = "x = f(" + ", ".join(f"argument_{i}" for i in range(12)) + ")\n"
    assert _wrap(long_line, original=long_line) == long_line
    commented = long_line.rstrip("\n") + "  # why\n"
    assert _wrap(commented) == commented
    lambdas = "y = g(lambda first_parameter, second_parameter, third_parameter: first_parameter + 1)  \n"
    wrapped = _wrap(lambdas.replace("  \n", "\n"))
    assert "lambda first_parameter, second_parameter, third_parameter:" in wrapped


def test_the_migration_wraps_what_it_writes():
    source = b'''import functools

import jax


@functools.partial(jax.pmap, axis_name="data_parallel_axis", in_axes=(None, 0, 0, None), static_broadcasted_argnums=(3,))
def step(w, x, y, flag):
    return w
'''
    text = migrate_source(source).source.decode()
    assert max(len(line) for line in text.splitlines() if "pmap-migrate" not in line
               and "call.lower" not in line) <= LINE_LIMIT
    assert "@functools.partial(\n    _pmap_style_shard_map," in text


_NAMES = st.from_regex(r"[a-z][a-z_]{2,14}", fullmatch=True).filter(
    lambda s: s not in {"for", "if", "in", "is", "and", "or", "not", "lambda", "def", "del",
                        "try", "else", "elif", "with", "while", "async", "await", "yield",
                        "return", "pass", "from", "class", "global", "assert", "import",
                        "raise", "break", "continue", "finally", "except", "nonlocal", "as"})


def _calls(depth: int):
    leaf = _NAMES | st.integers(0, 999).map(str)
    if depth == 0:
        return leaf
    inner = _calls(depth - 1)
    call = st.tuples(_NAMES, st.lists(inner, min_size=0, max_size=5)).map(
        lambda t: f"{t[0]}({', '.join(t[1])})")
    keyword = st.tuples(_NAMES, _NAMES, inner).map(lambda t: f"{t[0]}({t[1]}={t[2]})")
    pair = st.lists(inner, min_size=2, max_size=4).map(lambda xs: f"({', '.join(xs)})")
    return leaf | call | keyword | pair


@settings(max_examples=150, deadline=None)
@given(target=_NAMES, callee=_NAMES, arguments=st.lists(_calls(3), min_size=1, max_size=6),
       indent=st.sampled_from(["", "    ", "        "]))
def test_wrapping_keeps_the_tree_and_is_idempotent(target, callee, arguments, indent):
    body = f"{indent}{target} = {callee}({', '.join(arguments)})\n"
    text = "".join(f"{'    ' * i}if x:\n" for i in range(len(indent) // 4)) + body
    once = wrap_long_lines(text.encode(), b"")
    assert ast.dump(ast.parse(once)) == ast.dump(ast.parse(text))
    assert wrap_long_lines(once, b"") == once
    assert wrap_long_lines(once, text.encode()) == once


def test_a_split_that_would_change_the_tree_is_dropped(monkeypatch):
    """The AST check is what makes wrapping safe: a splitter that changed the code would leave
    the line as written (the other lines keep their wraps)."""
    import transforms.line_wrap as line_wrap

    good = line_wrap._split_statement
    long_call = "y = f(" + ", ".join(f"argument_{i}" for i in range(12)) + ")"
    bad_call = "z = g(" + ", ".join(f"value_{i}" for i in range(14)) + ")"
    monkeypatch.setattr(line_wrap, "_split_statement", lambda text, indent, statement=True: (
        ["z = 0"] if text.startswith("z =") else good(text, indent, statement)))
    text = _wrap(f"{long_call}\n{bad_call}\n")
    assert bad_call in text and long_call not in text
    assert ast.dump(ast.parse(text)) == ast.dump(ast.parse(f"{long_call}\n{bad_call}\n"))


def test_a_long_from_import_gets_its_names_in_brackets_one_per_line():
    """The helper imports the migration adds, with `as` renames, as black writes them."""
    source = b'''import jax


def _device_put_replicated(x):
    return x


def step(x):
    return jax.lax.psum(x, "i")


p = jax.pmap(step, axis_name="i")
y = jax.device_put_replicated(1.0, jax.local_devices())
'''
    migrated = migrate_source(
        source, helper_module="experiments.training_utilities._pmap_helpers").source.decode()
    assert max(len(line) for line in migrated.splitlines()) <= LINE_LIMIT
    assert migrated.startswith(textwrap.dedent('''\
        import jax
        from experiments.training_utilities._pmap_helpers import (
            _device_put_replicated as _device_put_replicated_2,
            _pmap_style_shard_map,
        )
    '''))
    assert _wrap(migrated, "") == migrated  # a second pass changes nothing
    # Left alone: a star import, and one with a statement after it.
    for line in ("from a_long_module_name_that_goes_on_and_on.and_on_further.still import *"
                 + " " * 40,
                 "from a import " + ", ".join(f"name_{i}" for i in range(12)) + "; x = 1"):
        assert _wrap(line + "\n") == line + "\n"
