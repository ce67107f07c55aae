"""Which files the rules must see: decided without libcst, in two stages.

1. Words (`WORDS`): a file that contains none of the rules' words cannot hold a site. A regex
   over the bytes; most files of a tree stop here.
2. References (`has_reference`): the words also match docstrings, comments, identifiers and
   jax's own definition of pmap (51 of the 617 files of the installed jax package, none with a
   site). Python's own `ast` (its C parser is about 30 times faster than libcst) and the
   module's imports tell whether the file refers to an API some rule acts on. The tree is
   handed on to ModuleFacts, so a file that does is still parsed once by each parser.

Stage 2 must never skip a file in which a rule would change or report something, so it errs
towards "yes". It also says which rules (`referenced_rules`): a file goes only through the
rules whose references it holds (a pmap-only file skips RemovedApis' and ConfigFlags' hooks). A file has a reference when it holds any of:
- a name or dotted name that any resolution libcst could give it makes one of the qualified
  names the rules act on (`RULE_REFERENCES`): every import target a local name has anywhere in
  the file counts, so does the dotted text itself (scope analysis names an attribute of a
  non-import binding after its text), and so do the names a star import might bring in;
- an import of one of those names, or a class named like their first part (scope analysis
  names the method in `class jax: def pmap` `jax.pmap`);
- an attribute the rules match by its name alone (`.device_buffers`, `.jax_pmap_shmap_merge`);
- a string literal that names the removed flag (ConfigFlags' test, read on the tokens, because
  libcst sees each part of an implicit concatenation as a string of its own);
- a `# pmap-migrate:` comment (an unused suppression is a finding, PM012).
A file the `ast` cannot read (a syntax error, which the full pipeline reports, or a grammar
newer than this interpreter) goes to the rules as before.

This module imports neither libcst nor the rules, so a run over files without references never
loads them. A rule added to transforms/pipeline.py RULES must add what it acts on here;
tests/test_prefilter.py checks the tables against the rule modules.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings

# Stage 1: files without any of the rules' words cannot hold a site (the words are each rule's
# PREFILTER_WORDS; tests/test_prefilter.py checks that the two lists are the same). Searched as
# plain bytes: one regex alternation of them costs ten times as much.
LITERAL_WORDS: tuple[bytes, ...] = (
    b"pmap", b"device_put_replicated", b"device_put_sharded", b"PmapSharding",
    b"ShardedDeviceArray", b"device_buffers", b"jax_utils", b"common_utils", b"device_count(",
    b"unreplicate",
)
# `jax.tree_util.tree_map` is common and fine: only another `tree_map` counts.
_TREE_MAP = re.compile(rb"(?<!tree_util\.)tree_map")
FLAG = "jax_pmap_shmap_merge"  # in any case: `JAX_PMAP_SHMAP_MERGE` is its environment variable

# Stage 2: what each rule acts on: qualified names, and attributes matched by their name alone.
# Only a module with one of these can get a change or a finding from the rule (each reports or
# rewrites only at, or in the presence of, such a reference). The values are the rules' own
# constants; tests/test_prefilter.py checks them against the rule modules, which are not
# imported here so that a file without references never loads libcst.
PMAP = "jax.pmap"
RULE_REFERENCES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # A patch of jax.pmap matters next to a pmap site (PM211); chex's fakes alone get PM212.
    "PatchedPmap": (
        frozenset({PMAP, "chex.fake_pmap", "chex.fake_pmap_and_jit", "chex._src.fake.fake_pmap",
                   "chex._src.fake.fake_pmap_and_jit"}),
        frozenset({"fake_pmap", "fake_pmap_and_jit"}),
    ),
    # PM505 is given to pmap sites; the module's multi-process calls alone are not reported.
    "MultiProcess": (frozenset({PMAP}), frozenset()),
    # Active only where MultiProcess found evidence, which needs a jax.pmap reference.
    "ProcessIdioms": (frozenset({PMAP}), frozenset()),
    # Grouped collectives are reported only in modules that reference jax.pmap.
    "CollectiveGroups": (frozenset({PMAP}), frozenset()),
    "HostBarriers": (frozenset({PMAP}), frozenset()),
    "RemovedApis": (
        frozenset({"jax.sharding.PmapSharding", "jax.interpreters.pxla.ShardedDeviceArray",
                   "jax.pxla.ShardedDeviceArray", "jax.tree_map"}),
        frozenset({"device_buffers"}),
    ),
    # The device-count reshape (PM404/PM405) is reported only where jax.pmap is referenced.
    "DataPlacement": (
        frozenset({"jax.device_put_replicated", "jax.device_put_sharded",
                   "flax.jax_utils.prefetch_to_device", "flax.training.common_utils.shard",
                   "flax.jax_utils.replicate", PMAP}),
        frozenset(),
    ),
    "Unreplicate": (frozenset({PMAP, "flax.jax_utils.unreplicate"}), frozenset()),
    # Migrated helpers (`_pmap_style_shard_map`, ...) matter only next to a jax.pmap site.
    "PmapToShardMap": (frozenset({PMAP}), frozenset()),
    # Strings naming the flag are read separately (`_names_flag_in_strings`).
    "ConfigFlags": (frozenset({f"jax.config.{FLAG}"}), frozenset({FLAG})),
}

REFERENCED_NAMES = frozenset().union(*(names for names, _ in RULE_REFERENCES.values()))
REFERENCED_ATTRIBUTES = frozenset().union(*(attrs for _, attrs in RULE_REFERENCES.values()))
_LAST_PARTS = frozenset(name.rpartition(".")[2] for name in REFERENCED_NAMES)
_FIRST_PARTS = frozenset(name.partition(".")[0] for name in REFERENCED_NAMES)
# Suppressions.from_source reads comments only in files that contain this.
SUPPRESSION_WORD = b"pmap-migrate:"


def might_need_migration(source: bytes) -> bool:
    """Stage 1: whether the file contains one of the rules' words."""
    if any(word in source for word in LITERAL_WORDS):
        return True
    if b"tree_map" in source and _TREE_MAP.search(source):
        return True
    return FLAG.encode() in source.lower()


def parse_or_none(source: bytes) -> ast.Module | None:
    """Python's own parse of `source`, or None where it cannot read it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like are not ours to say
            return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def all_nodes(tree: ast.AST) -> list[ast.AST]:
    """`list(ast.walk(tree))`, walked once per tree: the reference walk, the import table and
    the multi-process check all read every node of the same tree (the walk, not the reading,
    is what costs)."""
    nodes = tree.__dict__.get("_pmap_migrate_nodes")
    if nodes is None:
        nodes = tree._pmap_migrate_nodes = list(ast.walk(tree))
    return nodes


ALL_RULES = frozenset(RULE_REFERENCES)


def has_reference(source: bytes, tree: ast.Module | None) -> bool:
    """Whether any rule could change or report something in the module (`tree` is
    `ast.parse(source)`, or None when it does not parse). False only when none can."""
    return bool(referenced_rules(source, tree))


def referenced_rules(source: bytes, tree: ast.Module | None) -> frozenset[str]:
    """The rules (class names, RULE_REFERENCES' keys) that could change or report something
    in the module: each rule whose references the module holds. A rule left out can do
    nothing here, so the pipeline need not run it. Every rule for a module the `ast` cannot
    read or with a suppression comment (a suppression no rule uses is a finding)."""
    if tree is None or SUPPRESSION_WORD in source:
        return ALL_RULES
    found = _References(tree).found()
    if FLAG.encode() in source.lower() and _names_flag_in_strings(source):
        found.add(f"jax.config.{FLAG}")
    return frozenset(rule for rule, (names, attributes) in RULE_REFERENCES.items()
                     if not found.isdisjoint(names) or not found.isdisjoint(attributes))


class _References:
    """One walk over the tree: the import targets of every local name, and the dotted names
    and attributes that could be references."""

    def __init__(self, tree: ast.Module):
        self.targets: dict[str, set[str]] = {}  # local name -> every dotted name imported as it
        self.star_modules: list[str] = []
        self.names: set[str] = set()  # ids of Name nodes (each may be a reference)
        self.dotted: list[tuple[str, str]] = []  # (root name, ".attr.attr") of attributes
        # Referenced names and attributes found without resolving a name: attributes matched
        # by their name, imports of a referenced name, the names a class shadows.
        self.direct: set[str] = set()
        self._walk(tree)

    def _walk(self, tree: ast.Module) -> None:
        for node in all_nodes(tree):
            kind = type(node)
            if kind is ast.Name:
                self.names.add(node.id)
            elif kind is ast.Attribute:
                if node.attr in REFERENCED_ATTRIBUTES:
                    self.direct.add(node.attr)
                elif node.attr in _LAST_PARTS:
                    self._note_attribute(node)
            elif kind is ast.Import:
                for alias in node.names:
                    self._imported(alias.asname or alias.name.partition(".")[0],
                                   alias.name if alias.asname else alias.name.partition(".")[0],
                                   alias.name)
            elif kind is ast.ImportFrom:
                base = "." * node.level + (node.module or "")
                for alias in node.names:
                    if alias.name == "*":
                        self.star_modules.append(base)
                        continue
                    dotted = f"{base}.{alias.name}" if node.module else f"{base}{alias.name}"
                    self._imported(alias.asname or alias.name, dotted, dotted)
            elif kind is ast.ClassDef and node.name in _FIRST_PARTS:
                self.direct.update(name for name in REFERENCED_NAMES
                                   if name.partition(".")[0] == node.name)

    def _imported(self, local: str, target: str, full: str) -> None:
        self.targets.setdefault(local, set()).add(target)
        parts = full.split(".")
        prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
        self.direct.update(prefix for prefix in prefixes if prefix in REFERENCED_NAMES)

    def _note_attribute(self, node: ast.Attribute) -> None:
        """Record `root` and `.a.b` for an attribute chain, walking through calls and
        subscripts as libcst names them (`np.zeros(3).reshape` is numpy.zeros.reshape)."""
        parts = []
        current: ast.expr = node
        while True:
            if isinstance(current, ast.Attribute):
                parts.append(current.attr)
                current = current.value
            elif isinstance(current, ast.Call):
                current = current.func
            elif isinstance(current, ast.Subscript):
                current = current.value
            else:
                break
        if isinstance(current, ast.Name):
            self.dotted.append((current.id, "." + ".".join(reversed(parts))))

    def _meanings(self, name: str) -> set[str]:
        """Every qualified name a local `name` could have."""
        meanings = {name} | self.targets.get(name, set())
        meanings.update(f"{module}.{name}" for module in self.star_modules)
        return meanings

    def found(self) -> set[str]:
        """The referenced names and attributes the module holds."""
        found = set(self.direct)
        for name in self.names:
            if name in self.targets or self.star_modules:
                found |= self._meanings(name) & REFERENCED_NAMES
        found.update(
            f"{meaning}{rest}" for root, rest in self.dotted for meaning in self._meanings(root)
            if f"{meaning}{rest}" in REFERENCED_NAMES
        )
        return found


def names_flag(value: str) -> bool:
    """ConfigFlags' test of a string: the flag, its environment variable or its absl flag."""
    return value.lstrip("-").split("=")[0].strip().lower() == FLAG


def _names_flag_in_strings(source: bytes) -> bool:
    """Whether a string token, read as libcst's SimpleString reads it, names the removed flag
    (ConfigFlags' own `_names_flag`). Undecidable tokens count as naming it."""
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type != tokenize.STRING or FLAG not in token.string.lower():
                continue
            prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))]
            if "f" in prefix.lower():
                continue  # an f-string is a FormattedString in libcst, not a SimpleString
            try:
                value = ast.literal_eval(token.string)
            except (SyntaxError, ValueError):
                return True  # a token this interpreter cannot read: assume it names the flag
            if isinstance(value, str) and names_flag(value):
                return True
    except (tokenize.TokenError, SyntaxError):
        return True
    return False
