"""The one reader of pmap's options (transforms/reading/pmap_options.py), and that the styles
agree with it: what the faithful rule refuses as no axis tree, no global form takes."""

from __future__ import annotations

import ast

import libcst as cst
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from transforms.faithful.specs import AxesNotTranslatable, axes_to_specs
from transforms.pipeline import migrate_source
from transforms.reading.pmap_options import (
    AxesDict,
    Unreadable,
    first_problem,
    literal_argnums,
    read_axes,
    read_axes_text,
    string_keyed,
)


def _read(text: str, what: str = "in_axes"):
    return read_axes_text(text, what)


@pytest.mark.parametrize("text, expected", [
    ("0", 0),
    ("None", None),
    ("(0, None, 2)", (0, None, 2)),
    ("[0, (None, 1)]", [0, (None, 1)]),
    ("0x1", 1),
])
def test_literal_trees_read_as_data(text, expected):
    assert _read(text) == expected


def test_dicts_keep_their_keys_in_source_order():
    tree = _read("{'b': 0, 'a': None}")
    assert isinstance(tree, AxesDict)
    assert string_keyed(tree) == {"b": 0, "a": None}
    assert [key.text for key, _ in tree.items] == ["'b'", "'a'"]
    assert string_keyed(_read("{k: 0}")) is None  # a key that is not a literal
    assert string_keyed(_read("{'a': 0, 'a': None}")) is None  # a repeated key


@pytest.mark.parametrize("text, code, message", [
    ("-1", "PM201", "in_axes has the negative axis -1; pmap never supported it"),
    ("(0, 'a')", "PM209", "in_axes has the leaf 'a', which is neither a non-negative int nor None"),
    ("(0, 1.5)", "PM209", "in_axes has the leaf 1.5, which is neither a non-negative int nor None"),
    ("axes", "PM203", "in_axes=axes is not a literal, so its specs cannot be derived here"),
    ("(0, True)", "PM203", "in_axes=True is not a literal, so its specs cannot be derived here"),
    ("(0, *rest)", "PM203", "in_axes unpacks another container (*x / **x)"),
    ("{'a': 0, **rest}", "PM203", "in_axes unpacks another container (*x / **x)"),
    ("[0, 0]", "PM202", "in_axes is a list; pmap needs a tuple and raises"),
    ("(x, -1)", "PM203", "in_axes=x is not a literal, so its specs cannot be derived here"),
    ("(-1, x)", "PM201", "in_axes has the negative axis -1; pmap never supported it"),
])
def test_first_problem_in_source_order(text, code, message):
    problem = first_problem(_read(text), "in_axes")
    assert problem == Unreadable(code, message)


def test_a_list_is_only_refused_as_a_top_level_in_axes():
    assert first_problem(_read("[0, 0]", "out_axes"), "out_axes") is None
    assert first_problem(_read("(0, [0, None])"), "in_axes") is None


@pytest.mark.parametrize("text, expected", [
    ("0", (0,)), ("(0, 2)", (0, 2)), ("[1]", (1,)), ("()", ()),
    ("-1", None), ("(0, n)", None), ("True", None), ("argnums", None), ("((0,),)", None),
])
def test_literal_argnums(text, expected):
    assert literal_argnums(ast.parse(text, mode="eval").body) == expected


# -- the styles read through it -----------------------------------------------------------

_leaf = st.sampled_from(["0", "1", "None", "-1", "'a'", "1.5", "True", "x", "*x"])
_axes_text = st.recursive(
    _leaf,
    lambda sub: st.one_of(
        st.lists(sub, min_size=1, max_size=3).map(lambda xs: "(" + ", ".join(xs) + ",)"),
        st.lists(sub, min_size=1, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.sampled_from("abc"), sub, min_size=1, max_size=2).map(
            lambda d: "{" + ", ".join(f"'{k}': {v}" for k, v in d.items()) + "}"),
    ),
    max_leaves=5,
)


@settings(max_examples=200, deadline=None)
@given(text=_axes_text, what=st.sampled_from(["in_axes", "out_axes"]))
def test_the_faithful_rule_refuses_what_the_reader_finds(text, what):
    """axes_to_specs is the reader's verdict plus rendering: it refuses with the first problem
    the reader finds, and translates every tree it finds none in."""
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        assume(False)  # `*x` where Python does not allow it
    problem = first_problem(_read(text, what), what)
    try:
        axes_to_specs(cst.parse_expression(text), spec_func=cst.Name("P"),
                      axis_name=cst.Name("a"), what=what)
    except AxesNotTranslatable as refused:
        assert problem is not None and (refused.code, refused.message) == (
            problem.code, problem.message)
    else:
        assert problem is None


def test_the_reader_reads_ast_and_libcst_text_alike():
    text = "(0, {'a': None, 'b': (1, 0)}, [None])"
    assert read_axes(ast.parse(text, mode="eval").body, "in_axes") == _read(text)


_LIST_IN_AXES = b'''import jax
import jax.numpy as jnp


def step(x, y):
    return x + y


p_step = jax.pmap(step, axis_name="i", in_axes=[0, 0])


def run():
    x = jnp.ones((jax.local_device_count(), 3))
    return p_step(x, x)
'''


@pytest.mark.parametrize("style", ["faithful", "global"])
def test_a_list_in_axes_stays_as_written_in_both_styles(style):
    """pmap raises on a list in_axes (it needs a tuple): a program that raises must not come
    out as one that runs, so neither style migrates the site (PM202)."""
    result = migrate_source(_LIST_IN_AXES, style=style)
    assert not result.changed
    assert [f.code for f in result.findings if f.code.startswith("PM2")] == ["PM202"]
    assert not [f for f in result.findings if f.code in ("PM600", "PM612")]
