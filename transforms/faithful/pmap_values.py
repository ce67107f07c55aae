"""`jax.pmap` used as a value: migrated to the `_pmap_compat` drop-in when every use is a call.

`mapper = jax.pmap if multi else jax.vmap`, `{"pmap": jax.pmap, ...}` or `apply(jax.pmap, f)`
hide pmap's arguments from the tool, but if every load of the name the value is bound to (or
of the parameter it is passed to, in a function of this module) calls it (`mapper(f, ...)`,
`table[key](f, ...)`, `@mapper`), a drop-in with pmap's signature keeps every one of those
calls faithful. Anything else (an identity check, an attribute read, passing it on to code the
tool cannot see) keeps the finding PM205 with the reason.

Uses are gathered during the rule's single visit: every Name is recorded with how it is used
and which functions enclose it, and the decision is made when the module is left. Names are
matched by spelling within the binding's scope, which over-approximates the uses (a shadowing
name elsewhere only makes the tool more careful, never less). A module-level name can also be
imported by other modules; the drop-in is call-compatible there too, only `is jax.pmap` on it
elsewhere would change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

CALL, SUBSCRIPT_CALL, STORE, OTHER = "call", "subscript-call", "store", "other"


@dataclasses.dataclass
class ValueUse:
    node: cst.CSTNode  # the jax.pmap reference
    scope: cst.FunctionDef | None  # innermost enclosing function (None: module level)
    name: str | None = None  # bound to this name ...
    needs: str = CALL  # ... whose loads must all be this kind
    callee: str | None = None  # or passed to this module-level function ...
    position: int | str | None = None  # ... as this positional index or keyword
    refused: str | None = None  # or refused outright, with the reason


class NameUses:
    """Every Name of the module by spelling: (kind, enclosing functions, node)."""

    def __init__(self, parent: Callable[[cst.CSTNode], cst.CSTNode | None]):
        self._parent = parent
        self._seen: dict[str, list[tuple[tuple[cst.FunctionDef, ...], cst.Name]]] = {}
        self._classified: dict[str, list[tuple[str, tuple[cst.FunctionDef, ...], cst.Name]]] = {}
        self.module_defs: dict[str, list[cst.FunctionDef]] = {}

    def note(self, node: cst.Name, scopes: tuple[cst.FunctionDef, ...]) -> None:
        """Cheap: every Name passes here; only the names asked about are classified."""
        self._seen.setdefault(node.value, []).append((scopes, node))

    def _uses(self, name: str) -> list[tuple[str, tuple[cst.FunctionDef, ...], cst.Name]]:
        if name not in self._classified:
            uses = []
            for scopes, node in self._seen.get(name, ()):
                parent = self._parent(node)
                if isinstance(parent, cst.Attribute) and parent.attr is node:
                    continue  # `x.name`: not this variable
                if isinstance(parent, cst.Arg) and parent.keyword is node:
                    continue  # `f(name=...)`
                uses.append((self._kind(node, parent), scopes, node))
            self._classified[name] = uses
        return self._classified[name]

    def _kind(self, node: cst.Name, parent: cst.CSTNode | None) -> str:
        if isinstance(parent, cst.Call) and parent.func is node:
            return CALL
        if isinstance(parent, cst.Decorator) and parent.decorator is node:
            return CALL
        if isinstance(parent, cst.Subscript) and parent.value is node:
            grand = self._parent(parent)
            if isinstance(grand, cst.Call) and grand.func is parent:
                return SUBSCRIPT_CALL
            return OTHER
        if isinstance(parent, (cst.AssignTarget, cst.AnnAssign)) and parent.target is node:
            return STORE
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef)) and parent.name is node:
            return STORE
        return OTHER

    def loads(self, name: str, scope: cst.FunctionDef | None) -> list[tuple[str, cst.Name]]:
        """The non-store uses of `name` inside `scope` (the whole module when None)."""
        return [
            (kind, node)
            for kind, scopes, node in self._uses(name)
            if kind != STORE and (scope is None or scope in scopes)
        ]

    def stores(self, name: str) -> int:
        return sum(kind == STORE for kind, _, _ in self._uses(name))


def classify(
    node: cst.CSTNode,
    scope: cst.FunctionDef | None,
    parent: Callable[[cst.CSTNode], cst.CSTNode | None],
    code: Callable[[cst.CSTNode], str],
) -> ValueUse:
    """Where a pmap value goes: bound to a name, put in a dict bound to a name, or passed to a
    function; else refused with the reason."""
    use = ValueUse(node, scope)
    expr, up = node, parent(node)
    while isinstance(up, cst.IfExp) and expr is not up.test:
        expr, up = up, parent(up)
    if isinstance(up, cst.DictElement) and up.value is expr:
        expr, up = parent(up), parent(parent(up))
        use.needs = SUBSCRIPT_CALL
    if isinstance(up, (cst.Assign, cst.AnnAssign)) and up.value is expr:
        targets = [up.target] if isinstance(up, cst.AnnAssign) else [t.target for t in up.targets]
        if len(targets) != 1 or not isinstance(targets[0], cst.Name):
            use.refused = "is assigned to something other than one plain name"
        elif _in_class_body(up, parent):
            use.refused = "is kept as a class attribute, whose uses cannot be seen"
        else:
            use.name = targets[0].value
        return use
    if isinstance(up, cst.Arg) and up.value is expr and not up.star:
        call = parent(up)
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Name):
            positional = [a for a in call.args if not a.keyword]
            if up.keyword:
                use.position = up.keyword.value
            elif any(a.star for a in positional[: positional.index(up)]):
                use.refused = f"is passed to `{call.func.value}` after *args"
                return use
            else:
                use.position = positional.index(up)
            use.callee = call.func.value
            if use.needs == SUBSCRIPT_CALL:
                use.refused = f"is passed to `{call.func.value}` inside a dict"
            return use
        use.refused = f"is passed to `{_short(code(call.func))}`, which is not a function of this module"
        return use
    use.refused = _reason(up, code)
    return use


def _reason(up: cst.CSTNode | None, code: Callable[[cst.CSTNode], str]) -> str:
    if isinstance(up, (cst.Comparison, cst.ComparisonTarget)):
        return "is compared (`is` / `==`), which a drop-in would change"
    if isinstance(up, cst.Attribute):
        return "has an attribute read"
    if isinstance(up, cst.Return):
        return "is returned, so its uses are not visible here"
    if isinstance(up, cst.Param):
        return "is a default argument value"
    if isinstance(up, (cst.Element, cst.Tuple, cst.List, cst.Set)):
        return "is kept in a tuple, list or set"
    return "is used as a value here"


def refusal(use: ValueUse, names: NameUses, line: Callable[[cst.CSTNode], int]) -> str | None:
    """None when every use of the value is a call, else why not (`line`: a node's line)."""
    if use.refused:
        return use.refused
    if use.name is not None:
        loads = names.loads(use.name, use.scope)
        if not loads and use.scope is None:
            return f"is bound to `{use.name}`, which this module never uses (other modules may)"
        bad = [n for k, n in loads if k != use.needs]
        if bad:
            how = "called" if use.needs == CALL else "subscripted and called"
            return f"is bound to `{use.name}`, which is used other than {how} at line {line(bad[0])}"
        return None
    defs = names.module_defs.get(use.callee, [])
    if len(defs) != 1 or names.stores(use.callee) != 1:
        return f"is passed to `{use.callee}`, which is not a function defined once in this module"
    func = defs[0]
    if func.decorators:
        return f"is passed to `{use.callee}`, a decorated function"
    params = [*func.params.posonly_params, *func.params.params]
    if isinstance(use.position, int):
        if use.position >= len(params):
            return f"is passed to `{use.callee}` beyond its named parameters"
        param = params[use.position].name.value
    else:
        named = [p.name.value for p in (*params, *func.params.kwonly_params)]
        if use.position not in named:
            return f"is passed to `{use.callee}` as **kwargs"
        param = use.position
    bad = [n for k, n in names.loads(param, func) if k != CALL]
    if bad:
        return (
            f"is passed to `{use.callee}`, whose parameter `{param}` is used other than called "
            f"at line {line(bad[0])}"
        )
    return None


def _in_class_body(stmt: cst.CSTNode, parent) -> bool:
    up = parent(stmt)
    while up is not None and not isinstance(up, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        up = parent(up)
    return isinstance(up, cst.ClassDef)


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ReplaceByIdentity(cst.CSTTransformer):
    """Swap the given nodes (found by identity in a tree) for new ones."""

    def __init__(self, replacements: dict[int, cst.CSTNode]):
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):
        return self.replacements.get(id(original_node), updated_node)
