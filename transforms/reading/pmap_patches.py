"""Does a module patch `jax.pmap`? Test code does, to run pmap on one device.

`chex.fake_pmap()` and `chex.fake_pmap_and_jit()` replace `jax.pmap` with a vmap for the
duration of a `with` block (`mock.patch("jax.pmap", ...)` inside). Tests write the same by
hand: `mock.patch("jax.pmap", ...)`, `mock.patch.object(jax, "pmap", ...)`, pytest's
`monkeypatch.setattr(jax, "pmap", ...)`, or `jax.pmap = ...`. A pmap site migrated to
jit + shard_map no longer looks `jax.pmap` up when it runs, so the patch silently stops
reaching it: the test then runs the real thing on the real devices, or tests nothing.

Read from the standard `ast` with names resolved through the module's import table (local
name -> dotted name), like the multi-process evidence.
"""

from __future__ import annotations

import ast

from transforms.reading.prefilter import all_nodes

PMAP = "jax.pmap"
# chex's fakes, under the names chex exports them and the module that defines them.
FAKE_NAMES = frozenset({"fake_pmap", "fake_pmap_and_jit"})
CHEX_FAKES = frozenset(
    f"{module}.{name}" for module in ("chex", "chex._src.fake") for name in FAKE_NAMES
)
_MOCK_PATCH = frozenset({"unittest.mock.patch", "mock.patch"})
_MOCK_PATCH_OBJECT = frozenset(f"{name}.object" for name in _MOCK_PATCH)


def dotted(node: ast.AST, imported: dict[str, str]) -> str | None:
    """The dotted name `node` refers to through the imports (`np.zeros` -> numpy.zeros), or
    its own text when its root is not imported; None for anything but a name chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([imported.get(node.id, node.id), *reversed(parts)])


def is_chex_fake(name: str | None) -> bool:
    return name in CHEX_FAKES


def pmap_patch(tree: ast.Module, imported: dict[str, str]) -> tuple[int, str] | None:
    """(line, source text) of the first place the module patches `jax.pmap`, or None."""
    found = []
    for node in all_nodes(tree):
        if isinstance(node, ast.Call) and _patches_pmap(node, imported):
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            if is_chex_fake(dotted(node, imported)):
                found.append((node.lineno, node.col_offset, ast.unparse(node)))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and dotted(target, imported) == PMAP:
                    found.append((node.lineno, node.col_offset, f"{ast.unparse(target)} = ..."))
    if not found:
        return None
    line, _, text = min(found)
    return line, text


def fakes_of_other_modules(tree: ast.Module, imported: dict[str, str]) -> list[tuple[int, int]]:
    """(line, col) of the uses of chex's pmap fakes that can only fake other modules' pmaps:
    a `with fake_pmap():` whose block reaches no jax.pmap of this module (directly or through
    a function of the module it names), and, in a module with no jax.pmap at all, any use
    (`fake = chex.fake_pmap(); fake.start()` in a setUp)."""
    holds_pmap = any(refers_to_pmap(node, imported) for node in all_nodes(tree))
    reaching = _defs_reaching_pmap(tree, imported)
    reaches = lambda node: refers_to_pmap(node, imported) or (
        isinstance(node, ast.Name) and node.id in reaching)
    in_with: dict[int, bool] = {}  # id(fake reference) -> its with-block reaches jax.pmap
    for node in all_nodes(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            block = any(reaches(n) for s in node.body for n in ast.walk(s))
            for item in node.items:
                for n in ast.walk(item.context_expr):
                    in_with[id(n)] = block
    found = []
    for node in all_nodes(tree):
        if not (isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load)
                and is_chex_fake(dotted(node, imported))):
            continue
        if not in_with.get(id(node), holds_pmap):
            found.append((node.lineno, node.col_offset))
    return sorted(found)


def _defs_reaching_pmap(tree: ast.Module, imported: dict[str, str]) -> set[str]:
    """Names of the module's functions that refer to jax.pmap, or name such a function."""
    defs = {node.name: node for node in all_nodes(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(defs)
             for name, node in defs.items()}
    reaching = {name for name, node in defs.items()
                if any(refers_to_pmap(n, imported) for n in ast.walk(node))}
    while True:
        more = {name for name in defs if name not in reaching and names[name] & reaching}
        if not more:
            return reaching
        reaching |= more


def refers_to_pmap(node: ast.AST, imported: dict[str, str]) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute)) and dotted(node, imported) == PMAP


def _patches_pmap(call: ast.Call, imported: dict[str, str]) -> bool:
    """`mock.patch("jax.pmap", ...)`, `mock.patch.object(jax, "pmap", ...)`,
    `<monkeypatch>.setattr(jax, "pmap", ...)` / `.setattr("jax.pmap", ...)`,
    `setattr(jax, "pmap", ...)`."""
    callee = dotted(call.func, imported)
    args = call.args
    if callee in _MOCK_PATCH:
        return bool(args) and _is_string(args[0], PMAP)
    is_setattr = callee == "setattr" or (
        isinstance(call.func, ast.Attribute) and call.func.attr == "setattr"
    )
    if callee in _MOCK_PATCH_OBJECT or is_setattr:
        if len(args) >= 2 and dotted(args[0], imported) == "jax" and _is_string(args[1], "pmap"):
            return True
        return is_setattr and bool(args) and _is_string(args[0], PMAP)
    return False


def _is_string(node: ast.expr, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value
