"""Which names hold a pmapped function at a point of a module, in statement order.

`pmap(inner)` where `inner` holds a pmapped function is a nested pmap (PM206); `f = pmap(f)` is
not: the right-hand side reads the binding `f` had BEFORE the statement. So a binding counts
from the end of its statement on, and a later binding of the name to something else ends it.
What is not known for sure stays on the safe side (a refusal is better than a wrong rewrite):
- a rebinding that reads the name (`f = wrap(f)`, `f += ...`) may still hold the pmapped
  function, and so does one that runs only on some paths (in an `if`, a `try`, a loop body
  that the pmap binding is not in);
- in a loop, a pmap binding made later in the body is seen at the top of the next iteration:
  `for ...: step = pmap(step)` pmaps the pmapped `step` from the second iteration on, unless
  the body rebinds `step` first;
- a function body reads module names when it is called, so there it sees the module's last
  binding of the name, wherever the `def` stands.

Scopes are tuples of the enclosing `def`s and `class`es (innermost last); the module's is `()`.
A class body sees its own names and the enclosing ones; the functions inside it do not see
the class's names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from transforms.reading.snippets import find_all, parameters

Scope = tuple[cst.FunctionDef | cst.ClassDef, ...]
_BLOCKS = (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)
_NEW_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


@dataclasses.dataclass(frozen=True)
class PmapBinding:
    statement: cst.CSTNode  # the assignment or def that binds the pmapped function
    in_loop: bool = False  # seen from the previous iteration of a loop


@dataclasses.dataclass
class _Loop:
    node: cst.For | cst.While
    scope: Scope
    rebound: set[str] = dataclasses.field(default_factory=set)  # so far, in the body itself
    pmapped: dict[str, cst.CSTNode] | None = None  # name -> a pmap binding in the body


class PmappedNames:
    """Follows the bindings of names to pmapped functions while a transformer walks a module.

    The transformer calls `bind` when it LEAVES a binding statement, `enter_loop` /
    `leave_loop` around loops, and `lookup` at a pmap site. `maps_like_pmap(expr)` says whether
    an expression makes a pmapped function (pmap, a partial of it, a migrated helper)."""

    def __init__(
        self,
        module: cst.Module,
        parent: Callable[[cst.CSTNode], cst.CSTNode | None],
        maps_like_pmap: Callable[[cst.CSTNode], bool],
    ):
        self._module = module
        self._parent = parent
        self._maps_like_pmap = maps_like_pmap
        self._current: dict[tuple[str, Scope], cst.CSTNode] = {}
        self._local: set[tuple[str, Scope]] = set()  # names bound in a scope so far
        # the enclosing loops, innermost last; their pmap bindings are found on first lookup
        self._loops: list[_Loop] = []
        self._module_final: dict[str, cst.CSTNode] | None = None  # computed when first needed

    # -- what the walk reports ---------------------------------------------------------------

    def bind(self, name: str, scope: Scope, statement: cst.CSTNode, value: cst.CSTNode | None):
        """`statement` (just left) binds `name` in `scope`; `value` is what it binds (None: a
        `def`, whose decorators decide, or a form that gives no value to look at)."""
        key = (name, scope)
        self._local.add(key)
        for loop in self._loops:
            if loop.scope == scope and _block_of(statement, self._parent) is loop.node.body:
                loop.rebound.add(name)  # from here on the iteration sees this binding
        if self._makes_pmapped(statement, value):
            self._current[key] = statement
            return
        previous = self._current.get(key)
        if previous is None:
            return
        if value is not None and _reads(value, name):
            return  # `f = wrap(f)`: may still hold the pmapped function
        if _contains(_block_of(statement, self._parent), previous, self._parent):
            del self._current[key]  # runs after the pmap binding on every path

    def enter_loop(self, loop: cst.For | cst.While, scope: Scope) -> None:
        self._loops.append(_Loop(loop, scope))

    def leave_loop(self) -> None:
        self._loops.pop()

    def lookup(self, name: str, scope: Scope) -> PmapBinding | None:
        """The binding that makes `name` a pmapped function where it is read in `scope`."""
        key = (name, scope)
        if key in self._current:
            return PmapBinding(self._current[key])
        for loop in reversed(self._loops):
            if loop.scope != scope or name in loop.rebound:
                continue
            if loop.pmapped is None:
                loop.pmapped = {}
                for statement, bound, value in _bindings(loop.node.body):
                    if self._makes_pmapped(statement, value):
                        loop.pmapped.setdefault(bound, statement)
            if name in loop.pmapped:
                return PmapBinding(loop.pmapped[name], in_loop=True)
        if not scope:
            return None
        if key in self._local or _is_parameter(name, scope[-1]):
            return None  # a local name of this scope, bound to something else
        for depth in range(len(scope) - 1, 0, -1):  # enclosing scopes, innermost first
            if isinstance(scope[depth - 1], cst.ClassDef):
                continue  # a class's names are not seen by the functions inside it
            outer = (name, scope[:depth])
            if outer in self._current:
                return PmapBinding(self._current[outer])
            if outer in self._local or _is_parameter(name, scope[depth - 1]):
                return None
        if not any(isinstance(s, cst.FunctionDef) for s in scope):
            # class bodies run where they stand, with the module's bindings so far
            module = self._current.get((name, ()))
            return PmapBinding(module) if module is not None else None
        statement = self._module_bindings().get(name)
        return PmapBinding(statement) if statement is not None else None

    # -- inside -----------------------------------------------------------------------------

    def _makes_pmapped(self, statement: cst.CSTNode, value: cst.CSTNode | None) -> bool:
        if isinstance(statement, cst.FunctionDef):
            return any(self._maps_like_pmap(d.decorator) for d in statement.decorators)
        return isinstance(value, cst.Call) and self._maps_like_pmap(value.func)

    def _module_bindings(self) -> dict[str, cst.CSTNode]:
        """Each module name's last pmap binding that no later top-level statement undoes:
        what a function body sees when it is called after the module has run."""
        if self._module_final is None:
            final: dict[str, cst.CSTNode] = {}
            for statement, name, value in _bindings(self._module):
                if self._makes_pmapped(statement, value):
                    final[name] = statement
                elif (
                    name in final
                    and not (value is not None and _reads(value, name))
                    and _block_of(statement, self._parent) is self._module
                ):
                    del final[name]
            self._module_final = final
        return self._module_final


def _bindings(root: cst.CSTNode):
    """(statement, name, value) for the name bindings of `root`'s own scope, in source order:
    assignments to plain names and defs (not those inside nested functions or classes)."""
    found: list[tuple[cst.CSTNode, str, cst.CSTNode | None]] = []

    class _Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            found.append((node, node.name.value, None))
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            found.append((node, node.name.value, None))
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    found.append((node, target.target.value, node.value))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if isinstance(node.target, cst.Name) and node.value is not None:
                found.append((node, node.target.value, node.value))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if isinstance(node.target, cst.Name):
                found.append((node, node.target.value, node))  # reads the name it binds

    root.visit(_Collect())
    return found


def _reads(value: cst.CSTNode, name: str) -> bool:
    """`value` reads `name` (an augmented assignment always reads its target)."""
    return isinstance(value, cst.AugAssign) or bool(
        find_all(value, cst.Name, lambda n: n.value == name))


def _is_parameter(name: str, scope: cst.FunctionDef | cst.ClassDef) -> bool:
    if isinstance(scope, cst.ClassDef):
        return False
    return any(p.name.value == name for p in parameters(scope.params))


def _block_of(statement: cst.CSTNode, parent) -> cst.CSTNode | None:
    """The block (module, indented block, one-line suite) a statement stands in."""
    node = parent(statement)
    while node is not None and not isinstance(node, _BLOCKS):
        node = parent(node)
    return node


def _contains(block: cst.CSTNode | None, statement: cst.CSTNode, parent) -> bool:
    """`statement` stands in `block`, at any depth but not inside a nested function or class."""
    node = parent(statement)
    while node is not None:
        if node is block:
            return True
        if isinstance(node, _NEW_SCOPES):
            return False
        node = parent(node)
    return False
