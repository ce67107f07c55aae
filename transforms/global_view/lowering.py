"""A global site compiled ahead of time in a caller, and the `*xs` arguments of a site's call.

`step.lower(args)` reads its arguments as a call of the step does (the same in_specs, the
same edits: global arrays in multi-process modules), and `step.lower(args).compile()` is the
step's program: a name bound to it, and `step.lower(args).compile()(...)` itself, are calls of
the step, with the step's layouts, results and donation. The rewritten program keeps
`.lower(...).compile()` on the jitted global function, which jax.jit supports, and its compiled
program takes the same global arrays as the step. Anything else done with the lowered or
compiled object (passed on, stored, returned, an attribute read) is a use the analysis does
not follow: the caller keeps pmap's contract, with the blocker naming that use.

`f(x, *xs)`: `xs` a tuple or list of values of known layouts and known length (a display, a
comprehension over a display, or an element of a list of them) fills that many parameters,
each with its element's layout. A mixin of `CallerAnalysis` (dataflow.py holds the state).
"""

from __future__ import annotations

import ast

from transforms.codes.global_view import CALLERS_UNSEEN
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import SAME, Kind


class LoweringMixin:
    """`CallerAnalysis`'s reading of `.lower(...).compile()` and of starred arguments."""

    def _lowering_call(self, call: ast.Call) -> Kind | None:
        """The kind of `site.lower(...)`, of `.compile()` of it, or of a call of the compiled
        program (a call of the site); None for any other call."""
        func = call.func
        site = self._lowered_site(func)
        if site is not None:
            self.lowerings.add(id(call))
            self.site_call(call, site)  # the arguments, read (and edited) as a call's
            self.site_calls.pop(id(call), None)  # lowering donates nothing
            return Kind("lowered", holder=site.key)
        if isinstance(func, ast.Attribute) and func.attr == "compile" and (
                _is_lower_call(func.value) or isinstance(func.value, ast.Name)
                and self.kinds.get(func.value.id, SAME).tag == "lowered"):
            lowered = self.eval(func.value)
            if lowered.tag != "lowered":
                return None
            for argument in [*call.args, *(k.value for k in call.keywords)]:
                self._need_same(argument)  # compiler options: plain values
            return Kind("compiled", holder=lowered.holder)
        if isinstance(func, ast.Name) and self.kinds.get(func.id, SAME).tag == "compiled" or (
                isinstance(func, ast.Call) and isinstance(func.func, ast.Attribute)
                and func.func.attr == "compile"):
            compiled = self.eval(func)
            if compiled.tag == "compiled":
                return self.site_call(call, self.all_sites[compiled.holder])
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            value = argument.value if isinstance(argument, ast.Starred) else argument
            kind = self.kinds.get(value.id, SAME) if isinstance(value, ast.Name) else SAME
            if kind.tag in ("lowered", "compiled"):
                site = self.all_sites[kind.holder]
                how = "lowered with `.lower(...)`" if kind.tag == "lowered" else \
                    "compiled with `.lower(...).compile()`"
                raise Blocker(CALLERS_UNSEEN, value, f"`{value.id}` ({site.label} {how}) passed "
                              f"to `{_short(call.func)}`: its uses there are not followed",
                              site=site.key)
        return None

    def _lowered_site(self, func) -> Site | None:
        """The site of `site.lower` (a site of this function called by name, not a factory)."""
        if isinstance(func, ast.Attribute) and func.attr == "lower" \
                and self.site_read(func.value) is not None \
                and not self.sites[func.value.id].factory:
            return self.sites[func.value.id]
        return None

    # -- starred arguments ----------------------------------------------------------------
    def positional(self, call: ast.Call, site: Site) -> list[tuple[ast.AST, Kind, int]]:
        """(argument node, kind, index in call.args) of each parameter the call fills: a
        `*xs` argument fills one per element of `xs`, each of the element's kind."""
        found = []
        for index, argument in enumerate(call.args):
            if not isinstance(argument, ast.Starred):
                found.append((argument, self.eval(argument), index))
                continue
            elements = self.elements(self.eval(argument.value), counted=True)
            if elements is None:
                raise Blocker(CALLERS_UNSEEN, argument,
                              f"{site.label} called with `{ast.unparse(argument)}`, whose "
                              "number of elements or their layouts are not known (one in_specs "
                              "tuple needs the layout of each parameter it fills)")
            found.extend((argument, kind, index) for kind in elements)
        return found

    def elements(self, kind: Kind, counted: bool = False) -> list[Kind] | None:
        """The kinds of the elements of a tuple or list of values of one known kind each: a
        tuple or list display (fields [0], [1], ...), or a list of one element kind (where
        `counted`, of known length); None for anything else. A plain value has no known
        elements unless not `counted` (iterating it gives plain values)."""
        if kind.tag == "fields" and [step for step, _ in kind.fields] == [
                f"[{i}]" for i in range(len(kind.fields))]:
            return [field for _, field in kind.fields]
        if kind.tag == "list" and kind.element is not None:
            if not counted:
                return [kind.element]
            return None if kind.length is None else [kind.element] * kind.length
        return None

    def element(self, kind: Kind) -> Kind | None:
        """The kind every element of an iterated value has (a list, a tuple display of values
        of one kind, a followed generator); None for what has no one known kind."""
        if kind.tag in ("list", "iterator"):
            return kind.element
        elements = self.elements(kind)
        if elements and all(e == elements[0] for e in elements):
            return elements[0]
        return None


def _short(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_lower_call(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "lower"


def compiled_aliases(function: ast.FunctionDef, sites: dict[str, Site]) -> dict[str, Site]:
    """Names bound to `site.lower(...).compile()` anywhere in `function` (flow-insensitive:
    for the process-dependence of their calls' results, multiprocess.py)."""
    found = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            site = compiled_site(node.value, sites)
            if site is not None:
                found[node.targets[0].id] = site
    return found


def compiled_site(node, sites: dict[str, Site]) -> Site | None:
    """The site of `site.lower(...).compile()`, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "compile" and _is_lower_call(node.func.value):
        lowered = node.func.value.func.value
        if isinstance(lowered, ast.Name):
            return sites.get(lowered.id)
    return None
