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
import symtable
from typing import TYPE_CHECKING

from transforms.codes.global_view import CONSUMER_UNKNOWN, OPTIONS
from transforms.global_view.argument_specs import ArgumentSpecsMixin
from transforms.global_view.axes import plan_axes
from transforms.global_view.call_kinds import CallKindsMixin
from transforms.global_view.callers import MODULE_CALLER
from transforms.global_view.consumers import ConsumersMixin
from transforms.global_view.donation_classes import check_donated_reads
from transforms.global_view.expressions import ExpressionsMixin
from transforms.global_view.idioms import IdiomsMixin
from transforms.global_view.instances import InstancesMixin
from transforms.global_view.layout import OutputLayout
from transforms.global_view.local_functions import LocalFunctionsMixin
from transforms.global_view.lowering import LoweringMixin
from transforms.global_view.records import RecordsMixin
from transforms.global_view.site_calls import SiteCallsMixin
from transforms.global_view.site_discovery import stored_factory_calls, unpacked_factory_calls
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.statements import StatementsMixin
from transforms.global_view.values import (
    DEFAULT_AXIS,
    Kind,
    describe,
    layouts_of,
    least_rank,
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



class CallerAnalysis(LocalFunctionsMixin, StatementsMixin, InstancesMixin, ExpressionsMixin,
                     CallKindsMixin, SiteCallsMixin, LoweringMixin, ArgumentSpecsMixin,
                     IdiomsMixin, ConsumersMixin, RecordsMixin):
    """One module-level function that calls global sites.

    The class is put together from mixins, one concern each, that share this object's state.
    Their contract:
    - state, set here: function, module, sites / inline / all_sites, kinds (name -> Kind),
      edits (span -> text), specs and modes (per site key), returns, producers, site_calls;
    - here: _join (where two paths meet), _edit and render;
    - statements.py: _assign, _bind, and the hooks of interpreter.py's walk (_block, _loop);
    - expressions.py: eval(node) -> Kind, qualified(func) -> str, _need_same;
    - call_kinds.py: _call, the kind of a call; _helper_call, a module function followed;
    - site_calls.py: site_call(call, site) -> Kind, the kind of a site's results;
    - lowering.py: `site.lower(...).compile()` and its calls, `*xs` arguments (positional);
    - argument_specs.py: _argument_spec, the in_specs of one argument of a site's call;
    - idioms.py: producer(call, name) -> Kind | None, placed_batch(text);
    - consumers.py: _consumer(call, name) -> Kind | None;
    - instances.py: _analyse_body (the entry point of run) and the calls through instances;
    - local_functions.py: a def nested here and only called, read at each call.
    The public hooks site_call, producer and placed_batch are what MultiProcessCallerAnalysis
    (multiprocess.py) overrides.
    """

    def __init__(self, function: ast.FunctionDef, sites: dict[str, Site], module: "ModuleInfo",
                 parameters: dict[str, Kind] | None = None, depth: int = 0):
        """`parameters`: for a helper the caller passes the device count or stacks to, the
        kinds of its parameters (see `_helper_call`)."""
        self.function = function
        self.depth = depth
        # The helpers being followed on the way here (`_helper_call`): none is followed twice
        # in one chain, so a recursive helper is refused rather than followed forever.
        self.chain: frozenset[str] = frozenset()
        self.helpers: set[str] = set()  # helper functions this analysis edits too
        # Parameters left to a default of None: by a followed helper's call (set by the
        # caller's `_helper_call`), or by every call of a caller.
        self.defaulted_none: frozenset[str] = frozenset() if depth else \
            module.defaults_left_none(function)
        self.all_sites = sites
        # Names a call may use: module-level sites, and the sites built in this function.
        # Sites held by a class are reached through its instances (classes.py), not by name.
        self.sites = {s.name: s for s in sites.values() if s.owner is None and not s.holder}
        self.sites.update({s.name: s for s in sites.values() if s.owner and not s.inline})
        self.inline = {id(s.node): s for s in sites.values() if s.inline}
        # `made = factory(...)` then `made(x)`: the name holds the factory's site; so does the
        # name at the pmap's position of `made, lr = factory(...)` (a tuple it returns)
        stored = {target: call for target, call in stored_factory_calls(function).items()
                  if call.func.id in self.sites and self.sites[call.func.id].factory
                  and self.sites[call.func.id].returned is None}
        stored.update({target: call for target, (call, index, length)
                       in unpacked_factory_calls(function).items()
                       if call.func.id in self.sites and self.sites[call.func.id].factory
                       and self.sites[call.func.id].returned == (index, length)})
        self.made_by_factory = {target: self.sites[call.func.id]
                                for target, call in stored.items()}
        self.factory_builds = {id(call) for call in stored.values()}
        self.local_builds = {id(s.built) for s in sites.values() if s.owner and not s.inline}
        self.module = module
        self.kinds: dict[str, Kind] = {}
        self.edits: dict[tuple[int, int], str] = {}
        self.specs: dict[str, tuple[str, ...]] = {}
        self.modes: dict[str, str] = {}
        self.loaded = {n.id for n in ast.walk(function)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if function.name == MODULE_CALLER:
            # Top-level names are the module's globals: the functions it calls read them too
            # (`n` of `inputs.reshape(n, -1)` in a def the top-level code calls).
            self.loaded |= {n for n, count in module.loads.items() if count}
        for name, kind in (parameters or {}).items():
            if name in self.loaded:
                self.kinds[name] = kind
        self.returns: list[tuple[ast.AST, Kind]] = []
        self.producers: dict[str, ast.AST] = {}
        self.yields: list[tuple[ast.AST, Kind]] = []  # a followed generator's yielded values
        self.site_calls: dict[int, Site] = {}  # calls of sites, by node id (donation.py)
        self.lowerings: set[int] = set()  # `site.lower(...)` calls, by node id (lowering.py)
        # site calls -> (argument, kind, index in call.args) per parameter filled (lowering.py)
        self.expansions: dict[int, list] = {}
        self.produced: dict[int, str] = {}  # recognised producer calls -> qualified name
        self.stacked: dict[int, tuple[ast.AST, str]] = {}  # arguments kept stacked, and why
        # followed helper -> call -> the edits it asks of the helper (call_kinds._helper_call)
        self.helper_edits: dict[str, dict] = {}
        # helper -> ids of the `name` nodes of its calls this caller's analysis followed
        self.followed_calls: dict[str, set[int]] = {}
        # `x[i]["key"]`: x[i] is a container (an array row has no string keys), so x is a
        # list or tuple of trees and x[i] one of them, not a row of the device axis.
        self.container_rows = {id(n.value) for n in ast.walk(function)
                               if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Subscript)
                               and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)
                               and isinstance(n.value.slice, (ast.Constant, ast.UnaryOp))}
        self._changed = False
        # names bound, at some point, to a value whose layout the migration changes
        self.assigned_changed: dict[str, Kind] = {}

    merge_outputs = True  # per-device results with a leading axis come back merged (P(axis))
    per_device_scalars = True  # arange(n) into an elementwise body: (1,) blocks of P(axis)
    batches_placed = True  # shard / device_put_sharded batches become jax.Arrays on P(axis)
    stacked_arguments = True  # values in pmap's stacked layout go in as P(axis), squeezed
    # A body returning a tuple literal: each result gets its own layout, as with out_axes
    # (0, 0, ...), so a replicated state can loop while a per-device result stays stacked.
    split_results = False
    keep_stacked: frozenset = frozenset()  # producer calls (ids) left in pmap's layout
    keep_reasons: dict = {}  # ... with what asked for it, where a consumer did
    # Names a multi-process caller converts at each call rather than where they are bound
    # (multiprocess.py, placement_bindings.py).
    unhoisted: frozenset = frozenset()
    # When keeping values stacked does not rescue the function: report what failed first (the
    # cause) rather than the last attempt's blocker. Off where the fixpoint demotes one site
    # by the last blocker's site (single-process modules), unless that blocker names no site.
    report_first_cause = False
    # Records with per-device fields get in_specs per field (records.py); `record_log` lists
    # the ones given in this run (`run` analyses again without them where it fails), and
    # `records_refused` says why they were not given.
    record_specs = True
    record_log: list | None = None
    records_refused = ""

    def site_read(self, node: ast.AST) -> Site | None:
        """The site a name node reads by its name, if any: not one of the top-level reads
        that run before the site is bound (`Site.read_before`), which mean the name's earlier
        binding."""
        if not isinstance(node, ast.Name):
            return None
        site = self.sites.get(node.id)
        return None if site is None or id(node) in site.read_before else site

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> CallerResult:
        """The caller's edits (`_run_keeping`). Where a record was given specs per field
        (record_specs.py) and the function still fails, it is analysed again without them:
        the record's step keeps pmap's contract on its own (a blocker naming that site) and
        the function's other sites may still go global, as before specs per field."""
        if self.depth or not self.record_specs:
            return self._run_keeping()
        self.record_log = []
        try:
            return self._run_keeping()
        except Blocker as blocker:
            if not self.record_log:
                raise
            plain = type(self)(self.function, self.all_sites, self.module)
            plain.record_specs = False
            line = f", line {blocker.node.lineno}" if blocker.node is not None else ""
            plain.records_refused = f"its specs per field fail ({blocker.code}{line})"
            return plain.run()

    def _run_keeping(self) -> CallerResult:
        """The caller's edits. A consumer the analysis cannot follow sends the producers of the
        values it reads back to pmap's stacked layout (no edit, leading axis the device
        count), and the function is analysed again, until nothing more can be kept stacked."""
        keep: frozenset = frozenset()
        reasons: dict[int, str] = {}  # producer kept stacked -> the consumer that asked it
        first = None  # what failed before any value was kept stacked
        while True:
            try:
                return self._fresh(keep, reasons)._modes()
            except Blocker as blocker:
                first = first or blocker
                more = blocker.origins - keep
                if self.depth or not self.stacked_arguments or not more or len(keep) > 64:
                    if (self.report_first_cause or blocker.site is None) \
                            and first.code != blocker.code:
                        raise first from None
                    raise
                keep |= more
                # what asked for them: a consumer not followed, or a function whose body is not
                # read (site_calls.py), which sees one device's row
                if blocker.code in (CONSUMER_UNKNOWN, OPTIONS) and blocker.node is not None:
                    reasons.update({producer: f"line {blocker.node.lineno}: {blocker.message}"
                                    for producer in more})

    def _fresh(self, keep: frozenset, reasons: dict[int, str]) -> "CallerAnalysis":
        if not keep:
            return self
        fresh = type(self)(self.function, self.all_sites, self.module)
        fresh.keep_stacked = keep
        fresh.keep_reasons = reasons
        fresh.record_specs, fresh.record_log = self.record_specs, self.record_log
        fresh.records_refused = self.records_refused
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
                    return self._split_run()
                except Blocker as split_blocker:  # name the one that got further (at one
                    # place, one naming producers that could keep pmap's layout, to try next)
                    raise max(merged_blocker, stacked_blocker, split_blocker,
                              key=lambda b: (_position(b), bool(b.origins))) from None
        if merged.layouts and self.module.loads.get(self.function.name):
            # Module code calls this function: it must give back pmap's layouts if it can.
            try:
                return self._stacked()._run()
            except Blocker:
                pass
        return merged

    def _split_run(self) -> CallerResult:
        """Each result of a tuple its own layout; a replicated result some consumer cannot
        read as a global value (`_result_tree` names it by (call, position)) is given back in
        pmap's stacked layout instead, one result at a time, until the function goes through
        or what blocks it is something else."""
        keep = self.keep_stacked
        while True:
            attempt = self._stacked(split=True)
            attempt.keep_stacked = keep
            try:
                return attempt._run()
            except Blocker as blocker:
                results = {o for o in blocker.origins - keep if isinstance(o, tuple)}
                if not results:
                    raise
                keep = keep | results

    def _stacked(self, split: bool = False) -> "CallerAnalysis":
        stacked = type(self)(self.function, self.all_sites, self.module)
        stacked.merge_outputs = False
        stacked.split_results = split
        stacked.keep_stacked = self.keep_stacked
        stacked.keep_reasons = self.keep_reasons
        stacked.record_specs, stacked.record_log = self.record_specs, self.record_log
        stacked.records_refused = self.records_refused
        return stacked

    def _run(self) -> CallerResult:
        top_level = self.function.name == MODULE_CALLER
        if not top_level and (
                any(isinstance(n, ast.Name) and n.id == "mesh" for n in ast.walk(self.function))
                or any(a.arg == "mesh" for a in ast.walk(self.function)
                       if isinstance(a, ast.arg))):
            raise Blocker(CONSUMER_UNKNOWN, self.function,
                          "the name `mesh` the global style binds is "
                          "already used in this function")
        try:
            self._analyse_body()
            self.check_helpers_followed()
        except Blocker as blocker:
            if blocker.origins or blocker.site is not None:
                raise
            raise dataclasses.replace(blocker, origins=self._origins_at(blocker.node)) from None
        if top_level:
            self._check_module_names_unread()
        check_donated_reads(self)
        plan = plan_axes(self, DEFAULT_AXIS)  # several axis names: one mesh each (axes.py)
        layouts = self._layouts()
        return CallerResult(self.specs, self.modes, plan.axis, self.edits, layouts,
                            returns_changed=bool(layouts), site_axes=plan.site_axes,
                            meshes=plan.meshes, stacked=tuple(self.stacked.values()))

    def _check_module_names_unread(self) -> None:
        """Top-level code's names are the module's globals: a def, lambda or class that reads
        one (as Python's own symbol tables resolve it) which held a value whose layout the
        migration changes would see the new layout where it expected pmap's."""
        changed = self.assigned_changed
        if not changed:
            return
        exported = next((name for name in changed if self.module.elsewhere(name)), None)
        if exported is not None:
            node = next((n for n in ast.walk(self.function) if isinstance(n, ast.Name)
                         and n.id == exported), self.function)
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"`{exported}` is a module-level name bound to "
                          f"{describe(changed[exported])} in top-level code, and another module "
                          f"of the paths given uses it ({self.module.elsewhere(exported)})",
                          origins=origins(changed[exported]))
        reader = _global_reader(self.module.source, changed)
        if reader is None:
            return
        name, line = reader
        node = next((n for n in ast.walk(self.module.tree)
                     if isinstance(n, ast.Name) and n.id == name and n.lineno >= line),
                    self.function)
        raise Blocker(CONSUMER_UNKNOWN, node,
                      f"`{name}` is a module-level name bound to {describe(changed[name])} "
                      "in top-level code, and a function or class reads it",
                      origins=origins(changed[name]))

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
        if old.tag == new.tag == "iterator":  # `it = prefetch(it)` on one path only
            return Kind("iterator", element=self._join(old.element, new.element, name, node))
        if old.tag == new.tag == "list" and old.element == new.element:  # lengths differ
            return Kind("list", element=old.element)
        if old.tag == "empty_list" and new.tag in ("list", "same"):
            return new
        if new.tag == "empty_list" and old.tag in ("list", "same"):
            return old
        why = "".join(f" ({kind.why})" for kind in (old, new) if kind.why)
        raise Blocker(CONSUMER_UNKNOWN, node, f"`{name}` holds both {describe(old)} and "
                      f"{describe(new)}, depending on the path taken{why}",
                      origins=origins(old, new))

    # -- edits ----------------------------------------------------------------------------
    def _edit(self, node, text: str) -> None:
        self._edit_span(*self.module.span(node), text)

    def _edit_span(self, start: int, end: int, text: str) -> None:
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


def _global_reader(source: bytes, names) -> tuple[str, int] | None:
    """(name, line of the scope) of the first function, lambda or class body that reads or
    binds one of `names` as a module global."""
    try:
        tables = [symtable.symtable(source.decode("utf-8-sig"), "<module>", "exec")]
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return (next(iter(names)), 1)  # unreadable: as if read
    found = []
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        if table.get_type() == "module":
            continue
        for symbol in table.get_symbols():
            if symbol.get_name() in names and (symbol.is_global() or symbol.is_declared_global()):
                found.append((table.get_lineno(), symbol.get_name()))
    return (min(found)[1], min(found)[0]) if found else None
