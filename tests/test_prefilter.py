"""The precise prefilter (transforms/reading/prefilter.py) never skips a file that a rule would change
or report on.

Each check runs the full pipeline twice, with the prefilter and with every file that has one of
the rules' words sent to libcst (`precise_prefilter=False`, the pipeline before it existed), and
requires the same output and the same findings. The inputs: every fixture (before and after),
every corpus program, the generated benchmark trees, this repository's own sources (full of
`pmap` in names, strings and docstrings), drawn modules that mix references with look-alikes,
and, marked slow, the installed jax package and a tree of downloaded JAX packages.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import CORPUS, ROOT, fixture_cases
from transforms.faithful import (
    collective_groups,
    config_flags,
    host_barriers,
    multiprocess,
    placement,
    pmap_sites,
    removed_apis,
    unreplicate,
)
from transforms.reading import prefilter
from transforms.pipeline import RULES, migrate_source
from transforms.todo_comments import TODO_WORD, todo_findings

sys.path.insert(0, str(ROOT / "benchmarks"))
import gentree  # noqa: E402

# What the word stage was before it became plain byte searches: the rules' words as one regex.
RULES_WORDS = re.compile(b"|".join(word for rule in RULES for word in rule.PREFILTER_WORDS))


def outcome(result) -> tuple[bytes, list[str]]:
    return result.source, [f.to_text() for f in result.findings]


def assert_same_with_and_without(source: bytes) -> bool:
    """Both pipelines agree on `source`; returns whether the precise stage let it through."""
    precise = migrate_source(source)
    words_only = migrate_source(source, precise_prefilter=False)
    assert outcome(precise) == outcome(words_only)
    tree = prefilter.parse_or_none(source)
    passed = prefilter.has_reference(source, tree)
    if not passed:  # no rule acts here; only the TODO comments an earlier run left are reported
        left = todo_findings(source, tree, []) if TODO_WORD in source else []
        assert not words_only.changed and words_only.findings == left
    return passed


# -- the tables match the rules ----------------------------------------------------------------

def test_words_are_the_rules_words():
    ours = {re.escape(word) for word in prefilter.LITERAL_WORDS}
    ours |= {prefilter._TREE_MAP.pattern, b"(?i:" + prefilter.FLAG.encode() + b")"}
    theirs = {word for rule in RULES for word in rule.PREFILTER_WORDS}
    assert ours == theirs


def test_references_name_every_rule_and_its_constants():
    # Every rule has an entry (an entry may come before its rule is merged).
    assert {rule.__name__ for rule in RULES} <= set(prefilter.RULE_REFERENCES)
    names = {rule: names for rule, (names, _) in prefilter.RULE_REFERENCES.items()}
    attributes = {rule: attrs for rule, (_, attrs) in prefilter.RULE_REFERENCES.items()}
    assert names["MultiProcess"] == {multiprocess.PMAP}
    assert names["ProcessIdioms"] == {multiprocess.PMAP}  # needs MultiProcess's evidence
    assert names["CollectiveGroups"] == {collective_groups.PMAP}
    assert names["HostBarriers"] == {host_barriers.PMAP}
    assert names["RemovedApis"] == {*removed_apis.REPORTED, removed_apis.TREE_MAP}
    assert attributes["RemovedApis"] == set(removed_apis.REPORTED_ATTRIBUTES)
    assert names["DataPlacement"] == {*placement.RENAMED, *placement.REPORTED,
                                      placement.FLAX_REPLICATE, placement.PMAP}
    assert names["Unreplicate"] == {unreplicate.PMAP, unreplicate.FLAX_UNREPLICATE}
    assert names["PmapToShardMap"] == {pmap_sites.PMAP}
    assert names["ConfigFlags"] == {config_flags.FLAG_ATTRIBUTE}
    assert attributes["ConfigFlags"] == {config_flags.FLAG} == {prefilter.FLAG}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([
    "pmap", "jax.tree_util.tree_map", "tree_map", "x.device_buffers", "common_utils",
    "device_count(", "device_count", "JAX_PMAP_SHMAP_MERGE", "jax_pmap_shmap_MERGE", "unreplicate",
    "PmapSharding", "ShardedDeviceArray", "jax_utils", "device_put_sharded", "tree_util.",
    "p map", "device_put", " ", "\n", "é",
]), max_size=6).map("".join))
def test_word_stage_is_the_rules_regex(text):
    source = text.encode("utf-8")
    assert prefilter.might_need_migration(source) == bool(RULES_WORDS.search(source))


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("-= _ajxpmshergAJXPMSHERG\t"), max_size=30)
       | st.sampled_from(["jax_pmap_shmap_merge", "--jax_pmap_shmap_merge=0", " JAX_PMAP_SHMAP_MERGE ",
                          "jax_pmap_shmap_merge = 1", "- -jax_pmap_shmap_merge"]))
def test_flag_string_test_is_config_flags_own(value):
    import libcst as cst

    node = cst.SimpleString(repr(value))
    assert prefilter.names_flag(value) == config_flags._names_flag(node)


# -- what is and is not a reference --------------------------------------------------------------

NOT_REFERENCES = {
    "docstring": '"""Like jax.pmap, but better; see jax.tree_map."""\nimport jax\n',
    "comment": "import jax\n# jax.pmap(f) used to be here\nf = jax.jit(g)\n",
    "local variable": "def f(xs):\n    pmap = len(xs)\n    return pmap\n",
    "parameter and attribute": "def f(cfg):\n    return cfg.pmap_axis + cfg.use_pmap\n",
    "jax's own definition": (
        "from jax._src.api import pmap as pmap\n\ndef pmap(fun, axis_name=None):\n"
        '    """pmap docs."""\n    return _pmap_impl(fun)\n'),
    "tree_util.tree_map": "from jax.tree_util import tree_map\ny = tree_map(abs, x)\n",
    "other library's pmap": "import mylib\nf = mylib.pmap(g)\n",
    "flag in prose": 'import jax\nNOTE = "jax_pmap_shmap_merge was removed in 0.10"\n',
    "device_count without pmap": "import jax\nx = x.reshape(jax.local_device_count(), -1)\n",
    "string": "import jax\nname = 'jax.pmap'\n",
}
REFERENCES = {
    "call": "import jax\nf = jax.pmap(g)\n",
    "alias": "from jax import pmap as p\n",
    "module alias": "import jax as j\nf = j.pmap(g)\n",
    "through a call": "import jax\nf = jax(1).pmap\n",
    "unused import": "from jax import pmap\n",
    "star import": "from jax import *\nf = pmap(g)\n",
    "rebound module name": "jax = load()\nf = jax.pmap(g)\n",
    "tree_map": "import jax\ny = jax.tree_map(abs, x)\n",
    "tree_map import": "from jax import tree_map\n",
    "device_buffers": "y = x.device_buffers\n",
    "flax replicate": "from flax import jax_utils\nstate = jax_utils.replicate(state)\n",
    "flax common_utils": "import flax.training.common_utils as cu\nb = cu.shard(b)\n",
    "flag attribute": "import jax\nif jax.config.jax_pmap_shmap_merge:\n    pass\n",
    "flag string": 'import jax\njax.config.update("jax_pmap_shmap_merge", True)\n',
    "flag string concatenated": 'FLAGS = "--jax_pmap_shmap_merge" "=1 --other"\n',
    "env variable": 'os.environ["JAX_PMAP_SHMAP_MERGE"] = "1"\n',
    "class named jax": "class jax:\n    def pmap(self):\n        pass\n",
    "suppression": "import jax  # pmap-migrate: ignore\n",
    "syntax error": "def f(:\n    jax.pmap\n",
}


@pytest.mark.parametrize("name", list(NOT_REFERENCES))
def test_not_a_reference(name):
    source = NOT_REFERENCES[name].encode()
    assert prefilter.might_need_migration(source)
    assert not prefilter.has_reference(source, prefilter.parse_or_none(source))
    assert_same_with_and_without(source)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_a_reference(name):
    source = REFERENCES[name].encode()
    assert prefilter.has_reference(source, prefilter.parse_or_none(source))
    if name != "syntax error":
        assert_same_with_and_without(source)


PMAP_RULES = frozenset(rule for rule, (names, _) in prefilter.RULE_REFERENCES.items()
                       if prefilter.PMAP in names)


@pytest.mark.parametrize("source,rules", [
    ("import jax\nf = jax.pmap(g)\n", PMAP_RULES),
    ("import jax\ny = jax.tree_map(f, x)\n", {"RemovedApis"}),
    ("import jax\nf = jax.pmap(g)\ny = jax.tree_map(f, x)\n", PMAP_RULES | {"RemovedApis"}),
    ("from jax import device_put_replicated\n", {"DataPlacement"}),
    ("x = arr.device_buffers\n", {"RemovedApis"}),
    ('jax.config.update("jax_pmap_shmap_merge", True)\n', {"ConfigFlags"}),
    ("class jax:\n    def pmap(self):\n        pass\n", PMAP_RULES | {"RemovedApis", "ConfigFlags"}),
    ("import jax  # pmap-migrate: ignore\n", prefilter.ALL_RULES),
    ("def f(:\n    jax.pmap\n", prefilter.ALL_RULES),
])
def test_referenced_rules(source, rules):
    """Each file goes through the rules whose references it holds (the pipeline runs no
    other: the comparisons with every rule run, above and below, hold with that)."""
    source = source.encode()
    assert prefilter.referenced_rules(source, prefilter.parse_or_none(source)) == rules
    if b"def f(:" not in source:
        assert_same_with_and_without(source)


# -- every input the project has -----------------------------------------------------------------

def project_sources() -> list[Path]:
    files = [p for case in fixture_cases() for p in (case / "before.py", case / "after.py")]
    files += sorted(CORPUS.glob("*.py"))
    for folder in ("transforms", "migrator", "equivalence", "tests", "benchmarks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


@pytest.mark.slow  # reads every file of the project (40 s); .ci/run runs it
def test_every_fixture_corpus_program_and_project_file():
    passed = 0
    for path in project_sources():
        try:
            passed += assert_same_with_and_without(path.read_bytes())
        except AssertionError as error:
            raise AssertionError(f"{path}: {error}") from None
    assert passed  # the fixtures have references: the check is not vacuous


@pytest.mark.parametrize("fraction", [1.0, 0.03])
def test_generated_trees(tmp_path, fraction):
    gentree.generate_tree(tmp_path, 60, fraction, seed=7)
    for path in sorted(tmp_path.rglob("*.py")):
        assert_same_with_and_without(path.read_bytes())


PIECES = [
    # references
    "f = jax.pmap(g, axis_name='i')", "@jax.pmap\ndef h(x):\n    return x", "y = jax.tree_map(abs, x)",
    "z = x.device_buffers", "s = jax_utils.replicate(s)", "u = jax_utils.unreplicate(s)",
    "b = common_utils.shard(b)", "r = jax.device_put_replicated(x, jax.devices())",
    "if jax.config.jax_pmap_shmap_merge:\n    pass", "jax.config.update('jax_pmap_shmap_merge', True)",
    "q = pm(g)", "y = jax.lax.psum(x, 'i', axis_index_groups=[[0, 1], [2, 3]])",
    "n = jax.process_index()", "x = x.reshape(jax.local_device_count(), -1)",
    "out = p(x)\nv = float(out[0])",
    # look-alikes
    '"""pmap, tree_map, device_buffers, jax_pmap_shmap_merge."""', "# jax.pmap(f)",
    "pmap = 3", "def pmap(f):\n    return f", "jax.tree_util.tree_map(abs, x)",
    "cfg.use_pmap = True", "name = 'jax.pmap'", "unreplicated = 1",
    "def f(jax):\n    return jax.pmap", "class C:\n    def pmap(self):\n        return 1",
]
PRELUDES = [
    "import jax", "import jax as j", "from jax import pmap as pm", "from flax import jax_utils",
    "import flax.jax_utils as jax_utils", "from flax.training import common_utils",
    "from jax._src.api import pmap", "jax = object()", "import functools", "",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(PRELUDES), max_size=3), st.lists(st.sampled_from(PIECES), max_size=4))
def test_drawn_modules(preludes, pieces):
    source = "\n".join([*preludes, *pieces, ""]).encode()
    assert_same_with_and_without(source)


# -- real trees (slow) -------------------------------------------------------------------------

def real_trees() -> list[Path]:
    import jax  # only to find where it is installed; never run

    trees = [Path(jax.__file__).parent]
    extra = os.environ.get("PMAP_MIGRATE_REAL_TREES", "")
    trees += [Path(p) for p in extra.split(os.pathsep) if p]
    return trees


@pytest.mark.slow
def test_real_trees_with_and_without():
    """Every file with one of the rules' words, in the installed jax package and the trees
    listed in PMAP_MIGRATE_REAL_TREES (unpacked downloads of JAX packages)."""
    checked = passed = 0
    failures = []
    for tree in real_trees():
        for path in sorted(tree.rglob("*.py")):
            source = path.read_bytes()
            if not prefilter.might_need_migration(source):
                continue
            try:
                words_only = migrate_source(source, precise_prefilter=False)
            except Exception:  # noqa: BLE001 - a crash of the full pipeline is another test's
                continue
            checked += 1
            precise = migrate_source(source)
            passed += prefilter.has_reference(source, prefilter.parse_or_none(source))
            if outcome(precise) != outcome(words_only):
                failures.append(str(path))
    print(f"{checked} files with words, {passed} with references")
    assert not failures
    assert checked
