"""The callers of global sites: what each local value is, and the edits that remove the device axis.

Every local name of a calling function gets one `Kind` (flow-insensitive, iterated to a
fixpoint so loops that feed a step's outputs back in are covered):
- same: a value whose layout the migration does not change (host data, counters, constants);
- repl: pmap's replicated stack (equal rows along `axis`); the migrated value has no such axis;
- merged: pmap's per-device batch (device axis at `axis`, per-device batch after it); the
  migrated value has the two merged into one global batch axis;
- list: a Python list built with `.append` of values of one kind; devcount / devices: the
  device count and device list the stacks were built from.
A value of kind repl or merged may only reach producers, consumers and operations this module
recognises; anything else raises a `Blocker` naming the line, and the function falls back.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import TYPE_CHECKING

from transforms.codes.global_view import CALLERS_UNSEEN, CONSUMER_UNKNOWN
from transforms.global_view.argument_specs import ArgumentSpecsMixin
from transforms.global_view.axes import plan_axes
from transforms.global_view.call_kinds import CallKindsMixin
from transforms.global_view.consumers import ConsumersMixin
from transforms.global_view.donation import check_donated_reads
from transforms.global_view.expressions import ExpressionsMixin
from transforms.global_view.idioms import IdiomsMixin
from transforms.global_view.instances import InstancesMixin
from transforms.global_view.layout import OutputLayout
from transforms.global_view.site_calls import SiteCallsMixin
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import (
    DEFAULT_AXIS,
    SAME,
    Kind,
    describe,
    layouts_of,
    least_rank,
    list_of,
    origins,
)

if TYPE_CHECKING:
    from transforms.global_view.module_info import ModuleInfo


@dataclasses.dataclass
class CallerResult:
    specs: dict[str, tuple[str, ...]]  # site key -> in_specs texts
    modes: dict[str, str]  # site key -> REPLICATED_OUT (P(), unstacked) | STACKED_OUT
    axis: str
    edits: dict[tuple[int, int], str]
    layouts: tuple[OutputLayout, ...]
    returns_changed: bool
    site_axes: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> its mesh's axis
    meshes: tuple[tuple[str, str], ...] = ()  # (name, axis) of meshes besides `mesh` (axes.py)
    stacked: tuple[tuple[ast.AST, str], ...] = ()  # (argument, why) of arguments kept stacked



class CallerAnalysis(InstancesMixin, ExpressionsMixin, CallKindsMixin, SiteCallsMixin,
                     ArgumentSpecsMixin, IdiomsMixin, ConsumersMixin):
    """One module-level function that calls global sites.

    The class is put together from mixins, one concern each, that share this object's state.
    Their contract:
    - state, set here: function, module, sites / inline / all_sites, kinds (name -> Kind),
      edits (span -> text), specs and modes (per site key), returns, producers, site_calls;
    - statements, here: _statement, _block, _loop, _assign, _bind, _join; _edit and render;
    - expressions.py: eval(node) -> Kind, qualified(func) -> str, _need_same;
    - call_kinds.py: _call, the kind of a call; _helper_call, a module function followed;
    - site_calls.py: site_call(call, site) -> Kind, the kind of a site's results;
    - argument_specs.py: _argument_spec, the in_specs of one argument of a site's call;
    - idioms.py: producer(call, name) -> Kind | None, placed_batch(text);
    - consumers.py: _consumer(call, name) -> Kind | None;
    - instances.py: _analyse_body (the entry point of run) and the calls through instances.
    The public hooks site_call, producer and placed_batch are what MultiProcessCallerAnalysis
    (multiprocess.py) overrides.
    """

    def __init__(self, function: ast.FunctionDef, sites: dict[str, Site], module: "ModuleInfo",
                 parameters: dict[str, Kind] | None = None, depth: int = 0):
        """`parameters`: for a helper the caller passes the device count or stacks to, the
        kinds of its parameters (see `_helper_call`)."""
        self.function = function
        self.depth = depth
        self.helpers: set[str] = set()  # helper functions this analysis edits too
        self.all_sites = sites
        # Names a call may use: module-level sites, and the sites built in this function.
        # Sites held by a class are reached through its instances (classes.py), not by name.
        self.sites = {s.name: s for s in sites.values() if s.owner is None and not s.holder}
        self.sites.update({s.name: s for s in sites.values() if s.owner and not s.inline})
        self.inline = {id(s.node): s for s in sites.values() if s.inline}
        self.local_builds = {id(s.built) for s in sites.values() if s.owner and not s.inline}
        self.module = module
        self.kinds: dict[str, Kind] = {}
        self.edits: dict[tuple[int, int], str] = {}
        self.specs: dict[str, tuple[str, ...]] = {}
        self.modes: dict[str, str] = {}
        self.loaded = {n.id for n in ast.walk(function)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for name, kind in (parameters or {}).items():
            if name in self.loaded:
                self.kinds[name] = kind
        self.returns: list[tuple[ast.AST, Kind]] = []
        self.producers: dict[str, ast.AST] = {}
        self.yields: list[tuple[ast.AST, Kind]] = []  # a followed generator's yielded values
        self.site_calls: dict[int, Site] = {}  # calls of sites, by node id (donation.py)
        self.produced: dict[int, str] = {}  # recognised producer calls -> qualified name
        self.stacked: dict[int, tuple[ast.AST, str]] = {}  # arguments kept stacked, and why
        self.helper_parameters: dict[str, dict] = {}  # followed helper -> call -> its kinds
        # `x[i]["key"]`: x[i] is a container (an array row has no string keys), so x is a
        # list or tuple of trees and x[i] one of them, not a row of the device axis.
        self.container_rows = {id(n.value) for n in ast.walk(function)
                               if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Subscript)
                               and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)
                               and isinstance(n.value.slice, (ast.Constant, ast.UnaryOp))}
        self._changed = False

    merge_outputs = True  # per-device results with a leading axis come back merged (P(axis))
    per_device_scalars = True  # arange(n) into an elementwise body: (1,) blocks of P(axis)
    batches_placed = True  # shard / device_put_sharded batches become jax.Arrays on P(axis)
    stacked_arguments = True  # values in pmap's stacked layout go in as P(axis), squeezed
    # A body returning a tuple literal: each result gets its own layout, as with out_axes
    # (0, 0, ...), so a replicated state can loop while a per-device result stays stacked.
    split_results = False
    keep_stacked: frozenset = frozenset()  # producer calls (ids) left in pmap's layout
    # When keeping values stacked does not rescue the function: report what failed first (the
    # cause) rather than the last attempt's blocker. Off where the fixpoint demotes one site
    # by the last blocker's site (single-process modules).
    report_first_cause = False

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> CallerResult:
        """The caller's edits. A consumer the analysis cannot follow sends the producers of the
        values it reads back to pmap's stacked layout (no edit, leading axis the device
        count), and the function is analysed again, until nothing more can be kept stacked."""
        keep: frozenset = frozenset()
        first = None  # what failed before any value was kept stacked
        while True:
            try:
                return self._fresh(keep)._modes()
            except Blocker as blocker:
                first = first or blocker
                more = blocker.origins - keep
                if self.depth or not self.stacked_arguments or not more or len(keep) > 64:
                    if self.report_first_cause and first.code != blocker.code:
                        raise first from None
                    raise
                keep |= more

    def _fresh(self, keep: frozenset) -> "CallerAnalysis":
        if not keep:
            return self
        fresh = type(self)(self.function, self.all_sites, self.module)
        fresh.keep_stacked = keep
        return fresh

    def _modes(self) -> CallerResult:
        """Per-device results merged where every consumer follows them; if some consumer
        does not, the same function with those results in pmap's stacked layout."""
        try:
            merged = self._run()
        except Blocker as merged_blocker:
            if self.depth:
                raise
            try:
                return self._stacked()._run()
            except Blocker as stacked_blocker:
                try:  # a tuple of results: each its own layout (replicated ones P())
                    return self._stacked(split=True)._run()
                except Blocker as split_blocker:  # name the one that got further
                    raise max(merged_blocker, stacked_blocker, split_blocker,
                              key=_position) from None
        if merged.layouts and self.module.loads.get(self.function.name):
            # Module code calls this function: it must give back pmap's layouts if it can.
            try:
                return self._stacked()._run()
            except Blocker:
                pass
        return merged

    def _stacked(self, split: bool = False) -> "CallerAnalysis":
        stacked = type(self)(self.function, self.all_sites, self.module)
        stacked.merge_outputs = False
        stacked.split_results = split
        stacked.keep_stacked = self.keep_stacked
        return stacked

    def _run(self) -> CallerResult:
        if any(isinstance(n, ast.Name) and n.id == "mesh" for n in ast.walk(self.function)) or \
                any(a.arg == "mesh" for a in ast.walk(self.function) if isinstance(a, ast.arg)):
            raise Blocker(CONSUMER_UNKNOWN, self.function,
                          "the name `mesh` the global style binds is "
                          "already used in this function")
        try:
            self._analyse_body()
        except Blocker as blocker:
            if blocker.origins or blocker.site is not None:
                raise
            raise dataclasses.replace(blocker, origins=self._origins_at(blocker.node)) from None
        check_donated_reads(self)
        plan = plan_axes(self, DEFAULT_AXIS)  # several axis names: one mesh each (axes.py)
        layouts = self._layouts()
        return CallerResult(self.specs, self.modes, plan.axis, self.edits, layouts,
                            returns_changed=bool(layouts), site_axes=plan.site_axes,
                            meshes=plan.meshes, stacked=tuple(self.stacked.values()))

    def _origins_at(self, node) -> frozenset:
        """The producers behind the values `node` reads (names bound to them, producer calls
        in it): the values that could keep pmap's stacked layout instead."""
        found = set()
        for child in ast.walk(node) if node is not None else ():
            if isinstance(child, ast.Name) and child.id in self.kinds:
                found |= origins(self.kinds[child.id])
            elif isinstance(child, ast.Call) and id(child) in self.produced:
                found.add(id(child))
        return frozenset(found)

    def _assign(self, name: str, kind: Kind, node: ast.AST) -> None:
        """A binding: flow-sensitive, so `params = replicate(params)` is two values."""
        if name in self.loaded:  # a name never read (`_`) may hold anything
            self.kinds[name] = kind

    def _join(self, old: Kind | None, new: Kind | None, name: str, node) -> Kind | None:
        """The kind of `name` where two paths meet (a loop's back edge, if / else, append)."""
        if old is None or old == new:
            return new
        if new is None:
            return old
        if old.tag == new.tag == "same":
            # Stacked rows on both paths stay rows (a loop feeding a step's results back in).
            return Kind("same", rank=old.rank if old.rank == new.rank else None,
                        rows=old.rows and new.rows)
        if old.tag == new.tag == "merged" and old.axis == new.axis:  # ranks differ: keep the bound
            return Kind("merged", old.axis, rank=old.rank if old.rank == new.rank else None,
                        least=min(least_rank(old), least_rank(new)),
                        placed=old.placed and new.placed)
        if old.tag == new.tag == "repl" and old.axis == new.axis:  # one may be a sequence
            return Kind("repl", old.axis, tree=old.tree or new.tree,
                        origin=old.origin | new.origin)
        if old.tag == "empty_list" and new.tag in ("list", "same"):
            return new
        if new.tag == "empty_list" and old.tag in ("list", "same"):
            return old
        raise Blocker(CONSUMER_UNKNOWN, node, f"`{name}` holds both {describe(old)} and "
                      f"{describe(new)}, depending on the path taken",
                      origins=origins(old, new))

    def _merge(self, a: dict, b: dict, node) -> dict:
        return {name: self._join(a.get(name), b.get(name), name, node) for name in {*a, *b}}

    def _loop(self, s, head) -> None:
        """Iterate the body until the kinds at the loop head are stable."""
        span = self.module.span(s)
        for _ in range(8):
            entry = dict(self.kinds)
            for key in [k for k in self.edits if span[0] <= k[0] and k[1] <= span[1]]:
                del self.edits[key]  # only the settled iteration's edits are kept
            head()
            self._block(s.body)
            merged = self._merge(entry, self.kinds, s)
            if merged == entry:
                self.kinds = merged
                break
            self.kinds = merged
        else:
            raise Blocker(CONSUMER_UNKNOWN, s, "the values of this loop do not settle")
        self._block(s.orelse)

    # -- statements -----------------------------------------------------------------------
    def _block(self, statements) -> None:
        for statement in statements:
            self._statement(statement)

    def _statement(self, s) -> None:
        if isinstance(s, ast.Assign):
            if id(s.value) in self.local_builds:
                self._built(s)
                return  # `p = jax.pmap(...)`: p is a site of this function
            for target in s.targets:  # only for findings: what a name was last built by
                if isinstance(target, ast.Name):
                    self.producers[target.id] = s.value
            kind = self.eval(s.value)
            for target in s.targets:
                self._bind(target, kind, s.value)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self._bind(s.target, self.eval(s.value), s.value)
        elif isinstance(s, ast.AugAssign):
            if self.eval(s.value).changed or self.eval(s.target).changed:
                raise Blocker(CONSUMER_UNKNOWN, s, "an augmented assignment on a per-device value")
        elif isinstance(s, ast.Expr):
            self._expression_statement(s.value)
        elif isinstance(s, ast.For):
            def head():
                iterated = self.eval(s.iter)
                if iterated.tag in ("list", "iterator"):
                    self._bind(s.target, iterated.element, s.iter)
                elif iterated.changed:
                    raise Blocker(CONSUMER_UNKNOWN, s.iter, "a loop over the device axis")
                else:
                    self._bind(s.target, SAME, s.iter)
            self._loop(s, head)
        elif isinstance(s, ast.While):
            self._loop(s, lambda: self._same(s.test))
        elif isinstance(s, ast.If):
            self._same(s.test)
            entry = dict(self.kinds)
            self._block(s.body)
            after_body, self.kinds = self.kinds, entry
            self._block(s.orelse)
            self.kinds = self._merge(after_body, self.kinds, s)
        elif isinstance(s, ast.With):
            for item in s.items:
                self._same(item.context_expr)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, SAME, item.context_expr)
            self._block(s.body)
        elif isinstance(s, ast.Try):
            entry = dict(self.kinds)
            self._block(s.body)
            self._block(s.orelse)
            after = self.kinds
            for handler in s.handlers:
                self.kinds = dict(entry)
                self._block(handler.body)
                after = self._merge(after, self.kinds, handler)
            self.kinds = after
            self._block(s.finalbody)
        elif isinstance(s, ast.Return):
            self.returns.append((s, self.eval(s.value) if s.value is not None else SAME))
        elif isinstance(s, (ast.Pass, ast.Break, ast.Continue, ast.Import, ast.ImportFrom)):
            pass
        else:
            self._opaque(s)

    def _bind(self, target, kind: Kind, value) -> None:
        if isinstance(target, ast.Name):
            self._assign(target.id, kind, target)
        elif isinstance(target, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Starred) for e in target.elts):
            # `key, *rest = random.split(key, 3)`: only plain values; a starred name gets a
            # list of the parts, which no layout here describes
            elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else []
            if kind.changed or any(self.eval(e).changed for e in elements):
                raise Blocker(CONSUMER_UNKNOWN, target,
                              f"unpacking {describe(kind)} into a starred target")
            for element_target in target.elts:
                self._bind(element_target.value if isinstance(element_target, ast.Starred)
                           else element_target, SAME, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for element_target, element in zip(target.elts, value.elts):
                    self._bind(element_target, self.eval(element), element)
            elif kind.tag == "fields" and [k for k, _ in kind.fields] == [
                    f"[{i}]" for i in range(len(target.elts))]:
                for element_target, (_, field) in zip(target.elts, kind.fields):
                    self._bind(element_target, field, value)
            elif kind.tag in ("same", "repl"):  # unpacking a tuple output of a global step
                for element_target in target.elts:
                    self._bind(element_target, kind, value)
            else:
                raise Blocker(CONSUMER_UNKNOWN, target, f"unpacking {describe(kind)}")
        elif isinstance(target, ast.Attribute) and self._instance_store(target, kind, value):
            pass
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            if kind.changed or self.eval(target.value).changed:
                raise Blocker(CONSUMER_UNKNOWN, target,
                              "a per-device value stored into a container "
                              "or attribute")
        else:
            raise Blocker(CONSUMER_UNKNOWN, target,
                          "an assignment target the global style does not model")

    def _expression_statement(self, value) -> None:
        call = value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
                and len(call.args) == 1 and not call.keywords
                and self.kinds.get(call.func.value.id, SAME).tag in ("empty_list", "list", "same")):
            name = call.func.value.id
            element = self.eval(call.args[0])
            if element.changed and self.kinds.get(name, SAME).tag == "same" and \
                    name not in self.kinds:
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` is not a list made in this function")
            if name in self.kinds:
                self.kinds[name] = self._join(self.kinds[name], list_of(element), name, call)
            elif element.changed:
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` is not a list made in this function")
            return
        if isinstance(value, ast.Yield) and self.depth and value.value is not None:
            yielded = value.value  # a tuple literal stays a tuple: `x, y = next(batches)`
            kind = self._tuple_fields(yielded) if isinstance(yielded, ast.Tuple) else self.eval(yielded)
            self.yields.append((value, kind))
            return
        self.eval(value)

    def _tuple_fields(self, node: ast.Tuple) -> Kind:
        kinds = [self.eval(e) for e in node.elts]
        if any(isinstance(e, ast.Starred) for e in node.elts) or not any(k.changed for k in kinds):
            return self.eval(node)
        return Kind("fields", fields=tuple((f"[{i}]", k) for i, k in enumerate(kinds)))

    def _same(self, node) -> None:
        kind = self.eval(node)
        if kind.changed:
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"{describe(kind)} used in a condition or context")

    def _opaque(self, node) -> None:
        """A construct this module does not model: fine only if no per-device value or
        site reaches it."""
        for child in ast.walk(node):
            if isinstance(child, ast.Call) and id(child.func) in self.inline:
                raise Blocker(CALLERS_UNSEEN, child, "a pmap called on the spot in a construct "
                              f"the global style does not follow (a {type(node).__name__})",
                              site=self.inline[id(child.func)].key)
            if isinstance(child, ast.Name):
                if child.id in self.sites:
                    raise Blocker(CALLERS_UNSEEN, child, f"`{child.id}` used in a construct the "
                                  "global style does not follow")
                if self.kinds.get(child.id, SAME).changed:
                    raise Blocker(CONSUMER_UNKNOWN, child,
                                  f"`{child.id}` ({describe(self.kinds[child.id])})"
                                  f" used in a {type(node).__name__}")

    # -- edits ----------------------------------------------------------------------------
    def _edit(self, node, text: str) -> None:
        start, end = self.module.span(node)
        for key in [k for k in self.edits if start <= k[0] and k[1] <= end]:
            del self.edits[key]
        self.edits[(start, end)] = text

    def render(self, node) -> str:
        start, end = self.module.span(node)
        return self.module.render(start, end, self.edits)

    # -- layouts of what this function returns --------------------------------------------
    def _layouts(self) -> tuple[OutputLayout, ...]:
        found = {tuple(layouts_of(kind, "", node)) for node, kind in self.returns}
        if len(found) > 1:
            raise Blocker(CONSUMER_UNKNOWN, self.function, "its returns have different layouts")
        return found.pop() if found else ()


def _position(blocker: Blocker) -> tuple[int, int]:
    return getattr(blocker.node, "lineno", 0), getattr(blocker.node, "col_offset", 0)
