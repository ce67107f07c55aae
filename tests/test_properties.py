"""Properties over generated pmap programs: the tool never crashes, its output parses, a
second run changes nothing, and every generated site gets exactly one finding."""

from __future__ import annotations

import libcst as cst
import pytest
from hypothesis import given, settings, strategies as st

from transforms.pipeline import migrate_source

SITE_CODES = {"PM100", "PM201", "PM202", "PM203", "PM204", "PM205", "PM206", "PM207", "PM208", "PM209"}

leaf = st.sampled_from(["0", "1", "2", "None", "-1"])
axes = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: "(" + ", ".join(xs) + ",)"),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.sampled_from(["'a'", "'b'", "'w'"]), inner, min_size=1, max_size=2).map(
            lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"
        ),
    ),
    max_leaves=5,
)
axis_name = st.sampled_from([None, '"i"', "'batch'", "AXIS", "Cfg.axis"])
numbers = st.sampled_from([None, "0", "(0,)", "(0, 1)", "1"])


@st.composite
def pmap_arguments(draw):
    parts = []
    name = draw(axis_name)
    if name:
        parts.append(f"axis_name={name}")
    for keyword, strategy in (("in_axes", axes), ("out_axes", axes)):
        if draw(st.booleans()):
            parts.append(f"{keyword}={draw(strategy)}")
    for keyword in ("static_broadcasted_argnums", "donate_argnums"):
        value = draw(numbers)
        if value:
            parts.append(f"{keyword}={value}")
    return parts


FORMS = {
    "assigned": "f{i} = jax.pmap(body{args})\n",
    "on_the_spot": "y{i} = jax.pmap(lambda x: x * 2{args})(xs)\n",
    "partial_decorator": "@functools.partial(jax.pmap{args})\ndef g{i}(x, w):\n    return x\n",
    "bare_decorator": "@jax.pmap\ndef h{i}(x):\n    return x\n",
    "method": "class C{i}:\n    def __init__(self):\n        self.step = jax.pmap(self._step{args})\n",
    "factory": "def make{i}():\n    return pmap(body{args})\n",
    "under_jit": "j{i} = jax.jit(jax.pmap(body{args}))\n",
}


@st.composite
def programs(draw):
    lines = ["import functools", "import jax", "from jax import pmap", "AXIS = 'i'", ""]
    forms = draw(st.lists(st.sampled_from(sorted(FORMS)), min_size=1, max_size=5))
    for i, form in enumerate(forms):
        args = draw(pmap_arguments())
        joined = "".join(", " + a for a in args)
        lines.append(FORMS[form].format(i=i, args=joined))
    return "\n".join(lines), len(forms)


def check_program(program):
    source, n_sites = program
    result = migrate_source(source.encode())
    cst.parse_module(result.source)  # output parses
    site_findings = [f for f in result.findings if f.code in SITE_CODES]
    assert len(site_findings) == n_sites, result.findings
    again = migrate_source(result.source)
    assert again.source == result.source, "second run changed the output"
    refused = sorted(f.code for f in site_findings if f.code != "PM100")
    assert sorted(f.code for f in again.findings if f.code in SITE_CODES) == refused


@settings(max_examples=30, deadline=None, derandomize=True)
@given(programs())
def test_generated_programs(program):
    check_program(program)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(programs())
def test_generated_programs_sweep(program):
    """The larger sweep: `pytest -m slow tests/test_properties.py`."""
    check_program(program)
