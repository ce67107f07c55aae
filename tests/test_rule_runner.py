"""The single-pass rule runner and its cheap metadata give the same answers as libcst's.

Speed must never change an answer: the import table's qualified names are compared with
QualifiedNameProvider's on every fixture and corpus file, and the modules where the table
cannot be exact must fall back to scope analysis.
"""

from __future__ import annotations

import libcst as cst
import pytest
from conftest import CORPUS, fixture_cases
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import MetadataWrapper, ParentNodeProvider, QualifiedNameProvider
from libcst.metadata.base_provider import LazyValue

from transforms.imports import apply_queued_imports
from transforms.pipeline import migrate_source
from transforms.reading.names import ImportTable
from transforms.rule_runner import ModuleFacts, RuleRunner

SOURCES = [c / "before.py" for c in fixture_cases()] + sorted(CORPUS.glob("*.py"))
# The names rules ask about: anything that comes from these modules, or a builtin.
ROOTS = ("jax", "functools", "flax", "numpy", "builtins")


@pytest.mark.parametrize("path", SOURCES, ids=[f"{p.parent.name}/{p.name}" for p in SOURCES])
def test_import_table_agrees_with_scope_analysis(path):
    source = path.read_bytes()
    table = ImportTable.from_source(source)
    if table.needs_scope_analysis:
        pytest.skip("the runner uses libcst's scope analysis for this module")
    wrapper = MetadataWrapper(cst.parse_module(source))
    qualified = wrapper.resolve(QualifiedNameProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    checked = 0
    for node, names in qualified.items():
        if not isinstance(node, (cst.Name, cst.Attribute)):
            continue
        if isinstance(names, LazyValue):
            names = names()
        if _inside_import(node, parents):
            continue
        # libcst names `(a * b).astype` "builtins.None": an artefact, not a reference.
        expected = {
            q.name for q in names if q.name.split(".")[0] in ROOTS and q.name != "builtins.None"
        }
        got = {q for q in table.qualified(node, parents.get(node)) if q.split(".")[0] in ROOTS}
        assert got == expected, wrapper.module.code_for_node(node)
        checked += bool(expected)
    assert checked


def _inside_import(node, parents) -> bool:
    while node is not None:
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            return True
        node = parents.get(node)
    return False


@pytest.mark.parametrize(
    "source",
    [
        "import jax\ndef f(jax):\n    return jax.pmap(g)\n",  # a parameter shadows the import
        "from jax import *\npmap(f)\n",
        "from jax import pmap\nfrom chex import pmap\n",
        "import jax.numpy as np\nimport numpy as np\n",
        # imported only inside a def: unbound at module level
        "import jax\ndef g():\n    import functools\n@functools.partial(jax.pmap)\ndef f(x): ...\n",
    ],
)
def test_ambiguous_modules_fall_back_to_scope_analysis(source):
    assert ImportTable.from_source(source.encode()).needs_scope_analysis


def test_a_function_local_import_does_not_make_the_module_ambiguous_for_the_global_style():
    """The global style reads imports module-wide and refuses only ambiguous modules (PM607);
    a lazy import inside a function (numpyro's calibration.py) must not send it back."""
    source = b"import jax\ndef g():\n    from scipy import stats\nz = jax.pmap(f)(x)\n"
    table = ImportTable.from_source(source)
    assert table.needs_scope_analysis and not table.ambiguous
    codes = {f.code for f in migrate_source(source, style="global").findings}
    assert "PM607" not in codes and "PM612" in codes  # not sent back to the faithful helper


def test_imports_in_module_level_blocks_bind_at_module_scope():
    source = "try:\n    import functools\nexcept ImportError:\n    pass\nif x:\n    import jax\n"
    assert not ImportTable.from_source(source.encode()).needs_scope_analysis


@pytest.mark.parametrize("style", ["faithful", "global"])
def test_the_inline_helpers_local_import_does_not_resolve_module_names(style):
    """The faithful helper imports functools inside a function. On a second run that import
    must not make the module's unbound `functools.partial(jax.pmap, ...)` a pmap site."""
    source = (b"import jax\n\nx = jax.pmap(f)(xs)\n\n"
              b"@functools.partial(jax.pmap, axis_name='b')\ndef h(v):\n    return v\n")
    once = migrate_source(source, style=style).source
    assert migrate_source(once, style=style).source == once


def test_import_table_names():
    source = (
        b"import jax\nimport jax.numpy as jnp\nfrom functools import partial as P\n"
        b"x = jax.lax.psum(jnp.ones(3), 'i')\ny = P(f)\nz = float(x)\nw = q.pmap\n"
    )
    module = cst.parse_module(source)
    facts = ModuleFacts(module, source)
    table = facts.imports
    assert table.imported == {"jax": "jax", "jnp": "jax.numpy", "P": "functools.partial"}
    call = module.body[3].body[0].value
    assert facts.qualified(call.func) == {"jax.lax.psum"}
    assert facts.qualified(module.body[5].body[0].value.func) == {"builtins.float"}
    attribute = module.body[6].body[0].value
    assert facts.qualified(attribute) == set()  # `q` is not imported
    assert facts.qualified(attribute.attr) == set()  # `.pmap` alone is no reference


class _Recorder(cst.CSTTransformer):
    def __init__(self, log, name, mute=False, rename=None):
        super().__init__()
        self.log, self.name, self.mute, self.rename = log, name, mute, rename

    def visit_FunctionDef(self, node):
        self.log.append((self.name, "visit", node.name.value))
        return not self.mute

    def visit_Name(self, node):
        self.log.append((self.name, "name", node.value))

    def leave_Name(self, original_node, updated_node):
        if self.rename and original_node.value == self.rename[0]:
            return updated_node.with_changes(value=updated_node.value + self.rename[1])
        return updated_node


def test_runner_mutes_a_rule_below_a_false_visit_and_chains_leaves():
    source = b"def f():\n    a = b\n"
    module = cst.parse_module(source)
    log = []
    rules = [_Recorder(log, "muted", mute=True, rename=("a", "1")), _Recorder(log, "open", rename=("a", "2"))]
    out = module.visit(RuleRunner(rules, ModuleFacts(module, source)))
    assert ("muted", "name", "a") not in log and ("open", "name", "a") in log
    assert ("muted", "name", "f") not in log  # the def's own name is below it too
    # Only the open rule renamed `a`; a rule chained after another sees its result.
    assert out.code == "def f():\n    a2 = b\n"
    rules = [_Recorder([], "x", rename=("a", "1")), _Recorder([], "y", rename=("a", "2"))]
    assert module.visit(RuleRunner(rules, ModuleFacts(module, source))).code == "def f():\n    a12 = b\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (b'"""Doc."""\nimport jax\n\nx = 1\n', b'"""Doc."""\nimport jax\nfrom jax.sharding import PartitionSpec as P\n\nx = 1\n'),
        (b"from jax.sharding import Mesh\n", b"from jax.sharding import Mesh, PartitionSpec as P\n"),
        (b"from jax.sharding import PartitionSpec as P\n", b"from jax.sharding import PartitionSpec as P\n"),
        (b"from jax.sharding import (\n    Mesh,\n)\n", b"from jax.sharding import (\n    Mesh,\n    PartitionSpec as P,\n)\n"),
    ],
)
def test_queued_imports_are_added_once(source, expected):
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, "jax.sharding", "PartitionSpec", asname="P")
    assert apply_queued_imports(cst.parse_module(source), context).bytes == expected
    assert not context.scratch.get(AddImportsVisitor.CONTEXT_KEY)


def test_queued_removal_keeps_a_name_still_loaded():
    context = CodemodContext()
    RemoveImportsVisitor.remove_unused_import(context, "jax", "pmap")
    used = cst.parse_module(b"from jax import pmap, jit\ny = pmap(f)\n")
    assert apply_queued_imports(used, context).bytes == b"from jax import pmap, jit\ny = pmap(f)\n"
    RemoveImportsVisitor.remove_unused_import(context, "jax", "pmap")
    unused = cst.parse_module(b"# keep me\nfrom jax import pmap\ny = 1\n")
    assert apply_queued_imports(unused, context).bytes == b"# keep me\ny = 1\n"


@pytest.mark.parametrize("path", SOURCES, ids=[f"{p.parent.name}/{p.name}" for p in SOURCES])
def test_findings_placed_at_the_end_match_libcst_positions(path):
    """Without suppression comments, findings get their positions in one partial codegen pass
    after the rules ran; with one, every finding is placed at once by PositionProvider. The
    two must agree (a comment that suppresses nothing only adds PM012)."""
    from transforms.pipeline import migrate_source

    source = path.read_bytes()
    if b"pmap-migrate:" in source:
        pytest.skip("has suppression comments: always placed at once")
    newline = b"\r\n" if b"\r\n" in source else b"\n"
    tail = b"" if source.endswith(newline) or not source else newline
    marked = source + tail + b"# pmap-migrate: ignore[PM999]" + newline
    deferred = [(f.code, f.line, f.col) for f in migrate_source(source).findings]
    at_once = [(f.code, f.line, f.col) for f in migrate_source(marked).findings if f.code != "PM012"]
    assert deferred == at_once
