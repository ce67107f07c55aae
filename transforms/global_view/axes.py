"""A caller whose sites name different axes: one mesh per axis name.

A 1-D mesh carries one axis name, so a site of axis "j" runs on the module's mesh of "j"
(`_mesh("j")`: the same `jax.make_mesh` call, so the same devices in the same order). A caller
of sites of axes "i" and "j" binds the mesh of its most-called axis (`mesh`) and one more per
other axis (`mesh_j`), and what it places for a call of a "j" site names `mesh_j`. The meshes
differ only in the name of their one axis: an array placed with `P("i")` on `mesh` and one
placed with `P("j")` on `mesh_j` have the same layout, so values (and donated buffers) flow
between them unchanged. A site of another axis called where its placements cannot be told
apart from the main axis's (in a loop header, a lambda, a nested function) keeps the function
faithful with a PM602 finding naming the line.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import re
from collections import Counter

from transforms.codes.global_view import OPTIONS, PRODUCER_UNKNOWN
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    MESH_PLACEHOLDER,
    quoted,
)

MESH = "mesh"  # the mesh of the function's main axis (the name the single-axis style binds)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.GeneratorExp)
_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)


@dataclasses.dataclass(frozen=True)
class AxisPlan:
    axis: str  # the main axis: `mesh`'s
    site_axes: dict  # site key -> the axis of the mesh it runs under
    meshes: tuple = ()  # (mesh name, axis) of the other meshes, in order of first use


def plan_axes(analysis, default_axis: str) -> AxisPlan:
    """The meshes of one caller; for several axis names, the statement edits are added to
    `analysis.edits` (texts still hold AXIS_PLACEHOLDER / MESH_PLACEHOLDER for the main mesh)."""
    sites: dict[str, Site] = analysis.all_sites
    axes = {sites[key].axis_name for key in analysis.specs} - {None}
    if len(axes) <= 1:
        axis = axes.pop() if axes else default_axis
        return AxisPlan(axis, {key: axis for key in analysis.specs})
    calls = _site_calls(analysis)
    named = [sites[key].axis_name for _, key in calls if sites[key].axis_name is not None]
    # Only through helpers (a chain of folded callers): their calls choose the main axis,
    # and each helper of another axis names its own mesh (`_helpers_under_their_axis`).
    through = named or [sites[key].axis_name for _, key in _helper_site_calls(analysis)
                        if sites[key].axis_name is not None]
    if not through:  # called only where no call here is located (an instance's methods)
        key = min(analysis.specs, key=lambda k: sites[k].node.lineno)
        raise Blocker(OPTIONS, sites[key].node, f"calls pmap sites with different axis names "
                      f"({', '.join(sorted(axes))}), none of them from a statement of this "
                      "function or a helper it follows, so none can be put under its mesh")
    main = _main_axis(through)
    first = {main: 0}
    for name in named:
        first.setdefault(name, len(first))
    module = analysis.module
    taken = module_names(module.tree)
    meshes = {main: MESH}
    for name in sorted(set(named) - {main}, key=first.get):
        meshes[name] = fresh_name(f"{MESH}_{_identifier(name)}", taken)
    by_call = {id(call): key for call, key in calls}
    site_axes: dict[str, str] = {}
    statements = _Statements(analysis, by_call, main, meshes, site_axes, taken)
    statements.block(analysis.function.body)
    _helpers_under_their_axis(analysis, main, site_axes)
    for key in analysis.specs:
        if key not in site_axes and sites[key].axis_name not in (None, main):
            raise Blocker(OPTIONS, sites[key].node, f"calls pmap sites with different axis "
                          f"names, and {sites[key].label} is called where no statement of "
                          "this function can be put under its mesh: kept in the faithful style")
        site_axes.setdefault(key, sites[key].axis_name or main)
    order = [a for a in sorted(meshes, key=first.get) if a != main]
    return AxisPlan(main, site_axes, tuple((meshes[a], a) for a in order))


def _helpers_under_their_axis(analysis, main: str, site_axes: dict) -> None:
    """A helper the caller follows (flax imagenet's `sync_batch_stats`) that calls sites of
    one other axis only, each named with it, runs them under that axis's mesh: what it places
    for them names `_mesh("x")` and P("x") itself, since the caller's `mesh` is not in scope
    there."""
    module, sites = analysis.module, analysis.all_sites
    for name in sorted(analysis.helpers | _followed_helpers(analysis)):
        helper = module.functions[name]
        called = {key for key in analysis.specs for node in ast.walk(helper)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == sites[key].name and sites[key].owner in (None, name)}
        axes = {sites[key].axis_name for key in called}
        if len(axes) != 1 or None in axes or main in axes:
            continue
        axis = quoted(axes.pop())
        start, end = module.span(helper)
        for (first, last), text in list(analysis.edits.items()):
            if start <= first and last <= end:
                analysis.edits[(first, last)] = text.replace(AXIS_PLACEHOLDER, axis).replace(
                    MESH_PLACEHOLDER, f"{module.mesh_function}({axis})")
        site_axes.update((key, sites[key].axis_name) for key in called)


def _followed_helpers(analysis) -> set[str]:
    """The module functions the analysis followed at any depth, each rewritten once for
    every call (call_kinds.py `_helper_call`)."""
    return {name for name in analysis.helper_edits if name in analysis.module.functions}


def _helper_site_calls(analysis) -> list[tuple[ast.Call, str]]:
    """(call, site key) of the calls of sites by name in the helpers the analysis followed, at
    any depth: helper by helper, the outer first (a helper is recorded once its own
    helpers are, so that is the reverse of `helper_edits`), each in source order."""
    sites = analysis.all_sites
    found = []
    for name in [n for n in reversed(analysis.helper_edits) if n in analysis.module.functions]:
        calls = []
        for node in ast.walk(analysis.module.functions[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                key = next((k for k in analysis.specs if sites[k].name == node.func.id
                            and sites[k].owner in (None, name) and not sites[k].inline), None)
                if key is not None:
                    calls.append((node, key))
        found += sorted(calls, key=lambda c: (c[0].lineno, c[0].col_offset))
    return found


def _main_axis(named: list[str]) -> str:
    """The most-called axis name (the first called of those tied): `mesh`'s axis."""
    counts = Counter(named)
    first = {}
    for name in named:
        first.setdefault(name, len(first))
    return max(counts, key=lambda a: (counts[a], -first[a]))


def _site_calls(analysis, every: bool = False) -> list[tuple[ast.Call, str]]:
    """(call, site key) of every call of a site the analysis followed, in source order (the
    same three call shapes `ExpressionsMixin._call` dispatches on)."""
    found = []
    for node in ast.walk(analysis.function):
        if not isinstance(node, ast.Call):
            continue
        func, site = node.func, None
        if isinstance(func, ast.Call) and analysis.site_read(func.func) is not None \
                and analysis.sites[func.func.id].factory:
            site = analysis.sites[func.func.id]
        elif analysis.site_read(func) is not None:
            site = analysis.sites[func.id]
        elif id(func) in analysis.inline:
            site = analysis.inline[id(func)]
        if site is not None and (every or site.key in analysis.specs):
            found.append((node, site.key))
    return sorted(found, key=lambda c: (c[0].lineno, c[0].col_offset))


class _Statements:
    """Walks the caller's statements and gives each one that calls sites of an axis other than
    the main one its mesh."""

    def __init__(self, analysis, by_call, main, meshes, site_axes, taken):
        self.analysis = analysis
        self.module = analysis.module
        self.sites = analysis.all_sites
        self.by_call = by_call
        self.main = main
        self.meshes = meshes
        self.site_axes = site_axes
        self.taken = taken

    def block(self, statements) -> None:
        for statement in statements:
            if isinstance(statement, _SCOPES):  # runs when called, under whichever mesh
                self._under_main(list(ast.walk(statement)), statement, "inside a nested "
                                 "function or class")
                continue
            if isinstance(statement, _SIMPLE):
                self.simple(statement)
                continue
            bodies = [getattr(statement, f) for f in ("body", "orelse", "finalbody")
                      if isinstance(getattr(statement, f, None), list)]
            bodies += [h.body for h in getattr(statement, "handlers", [])]
            inner = {id(n) for body in bodies for s in body for n in ast.walk(s)}
            header = [n for n in ast.walk(statement) if id(n) not in inner]
            self._under_main(header, statement, "in the header of this statement")
            for body in bodies:
                self.block(body)

    def _calls_in(self, nodes) -> list[tuple[ast.Call, str]]:
        return [(n, self.by_call[id(n)]) for n in nodes if id(n) in self.by_call]

    def _axis_of(self, key: str, axis: str, node) -> str:
        """Record (and check) the mesh axis a site runs under: a site without axis_name runs
        under the mesh of the statement that calls it."""
        site = self.sites[key]
        axis = site.axis_name or axis
        if self.site_axes.setdefault(key, axis) != axis:
            raise Blocker(PRODUCER_UNKNOWN, node,
                          f"{site.label} has no axis_name and is called under "
                          f"the meshes of axes {quoted(self.site_axes[key])} and {quoted(axis)}")
        return axis

    def _under_main(self, nodes, statement, where: str) -> None:
        for call, key in self._calls_in(nodes):
            if self._axis_of(key, self.main, call) != self.main:
                raise self._blocker(call, f"{self.sites[key].label} (axis "
                                    f"{quoted(self.sites[key].axis_name)}) is called {where}, "
                                    "which cannot be put under that axis's mesh alone")

    def _blocker(self, node, why: str) -> Blocker:
        return Blocker(OPTIONS, node, f"calls pmap sites with different axis names, and {why}: "
                       "kept in the faithful style")

    def simple(self, statement) -> None:
        nested = {id(n) for scope in ast.walk(statement) if isinstance(scope, _SCOPES)
                  for n in ast.walk(scope) if n is not scope}
        nodes = list(ast.walk(statement))
        self._under_main([n for n in nodes if id(n) in nested], statement,
                         "inside a lambda, nested function or generator expression")
        calls = self._calls_in(n for n in nodes if id(n) not in nested)
        named = {self.sites[k].axis_name for _, k in calls} - {None}
        if not named or named == {self.main}:
            for call, key in calls:
                self._axis_of(key, self.main, call)
            return
        self._runs_no_helper(statement)
        if len(named) == 1:
            axis = named.pop()
            for call, key in calls:
                self._axis_of(key, axis, call)
            self.analysis._edit(statement, self._for_mesh(self.analysis.render(statement), axis))
            return
        inside = {id(n): key for call, key in calls for n in ast.walk(call) if n is not call}
        for call, key in calls:
            if id(call) in inside and self._axis_of(inside[id(call)], self.main, call) != \
                    self._axis_of(key, self.main, call):
                raise self._blocker(call, "one site's call is an argument of another's, so "
                                    "what is placed for it cannot name its own mesh")
        for call, key in calls:  # each call's placements name its own mesh
            axis = self._axis_of(key, self.main, call)
            if axis != self.main:
                self.analysis._edit(call, self._for_mesh(self.analysis.render(call), axis))

    def _runs_no_helper(self, statement) -> None:
        """A helper the analysis rewrote places values on the main mesh (bare `P(axis)`),
        so it must not run under another one."""
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in self.analysis.helpers:
                raise self._blocker(node, f"the helper `{node.func.id}`, which the analysis "
                                    "follows (and rewrites for the main mesh), runs in the same "
                                    "statement")

    def _for_mesh(self, text: str, axis: str) -> str:
        """Generated code for a call of `axis`'s sites names that axis and its mesh."""
        if axis == self.main:
            return text
        return text.replace(AXIS_PLACEHOLDER, quoted(axis)).replace(MESH_PLACEHOLDER,
                                                                    self.meshes[axis])


def fresh_name(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`, ... : the first the module does not use (then taken)."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}_{number}"
    taken.add(candidate)
    return candidate


def _identifier(axis: str) -> str:
    text = re.sub(r"\W", "_", axis).strip("_") or "axis"
    return text if not text[0].isdigit() else f"axis_{text}"


def module_names(tree: ast.Module) -> set[str]:
    """Every name the module binds or reads, so a new mesh or local shadows none of them."""
    names = set(keyword.kwlist) | {"mesh"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
