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

from transforms.global_view.sites import Blocker, Site, dotted
from transforms.global_view.layout import MERGED, REPLICATED, OutputLayout

if TYPE_CHECKING:  # rewrite.py imports this module
    from transforms.global_view.rewrite import ModuleInfo

AXIS_PLACEHOLDER = "\x00axis\x00"  # the caller's mesh axis, known once its sites are
TREE_MAP = {"jax.tree_util.tree_map", "jax.tree.map", "jax.tree_map"}
STACK = {"jax.numpy.stack", "numpy.stack"}
BROADCAST_TO = {"jax.numpy.broadcast_to", "numpy.broadcast_to"}
AS_ARRAY = {"numpy.asarray", "numpy.array", "jax.numpy.asarray", "jax.numpy.array",
            "jax.device_get"}
REDUCTIONS = {f"{m}.{f}" for m in ("numpy", "jax.numpy")
              for f in ("argmax", "argmin", "sum", "mean", "max", "min", "any", "all")}
DEVICE_COUNT = {"jax.local_device_count", "jax.device_count"}
DEVICES = {"jax.local_devices", "jax.devices"}
REPLICATE = {"jax.device_put_replicated", "flax.jax_utils.replicate"}
UNREPLICATE = {"flax.jax_utils.unreplicate"}
SHARD = {"flax.training.common_utils.shard"}
# numpy random draws fill their `size` in C order, so (n, b, ...) and (n * b, ...) draw the
# same numbers: the merged batch is the same data.
RNG_DRAWS = {"normal", "uniform", "standard_normal", "random", "integers", "randint", "rand"}
TO_SCALAR = {"builtins.float", "builtins.int", "builtins.bool"}
# Constant stacks: every row is the same, so they are replicated by construction.
CONSTANT_FILLS = {f"{m}.{f}" for m in ("numpy", "jax.numpy") for f in ("zeros", "ones", "full")}


@dataclasses.dataclass(frozen=True)
class Kind:
    tag: str  # same | repl | merged | list | empty_list | devcount | devices | fields
    axis: int = 0
    rank: int | None = None  # merged: the original's rank, where known
    element: Kind | None = None  # list: the kind of its elements
    fields: tuple = ()  # fields: ((key path step, Kind), ...) of a dict or tuple literal

    @property
    def changed(self) -> bool:
        return self.tag in ("repl", "merged", "list", "fields")


SAME = Kind("same")
REPL = Kind("repl")


def list_of(element: Kind) -> Kind:
    return SAME if element.tag in ("same", "devcount") else Kind("list", element=element)


DEFAULT_AXIS = "devices"  # the mesh axis when no site called names one
REPLICATED_OUT, STACKED_OUT = "replicated", "stacked"


@dataclasses.dataclass
class CallerResult:
    specs: dict[str, tuple[str, ...]]  # site key -> in_specs texts
    modes: dict[str, str]  # site key -> REPLICATED_OUT (P(), unstacked) | STACKED_OUT
    axis: str
    edits: dict[tuple[int, int], str]
    layouts: tuple[OutputLayout, ...]
    returns_changed: bool


class CallerAnalysis:
    """One module-level function that calls global sites."""

    def __init__(self, function: ast.FunctionDef, sites: dict[str, Site], module: "ModuleInfo",
                 parameters: dict[str, Kind] | None = None, depth: int = 0):
        """`parameters`: for a helper the caller passes the device count or stacks to, the
        kinds of its parameters (see `_helper_call`)."""
        self.function = function
        self.depth = depth
        self.helpers: set[str] = set()  # helper functions this analysis edits too
        self.all_sites = sites
        # Names a call may use: module-level sites, and the sites built in this function.
        self.sites = {s.name: s for s in sites.values() if s.owner is None}
        self.sites.update({s.name: s for s in sites.values() if s.owner and not s.inline})
        self.inline = {id(s.node): s for s in sites.values() if s.inline}
        self.local_builds = {id(s.node) for s in sites.values() if s.owner and not s.inline}
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
        self._changed = False

    # -- driver ---------------------------------------------------------------------------
    def run(self) -> CallerResult:
        if any(isinstance(n, ast.Name) and n.id == "mesh" for n in ast.walk(self.function)) or \
                any(a.arg == "mesh" for a in ast.walk(self.function) if isinstance(a, ast.arg)):
            raise Blocker("PM605", self.function, "the name `mesh` the global style binds is "
                          "already used in this function")
        self._block(self.function.body)
        axes = {self.all_sites[key].axis_name for key in self.specs} - {None}
        if len(axes) > 1:
            raise Blocker("PM602", self.function, "calls pmap sites with different axis names")
        layouts = self._layouts()
        return CallerResult(self.specs, self.modes, axes.pop() if axes else DEFAULT_AXIS,
                            self.edits, layouts, returns_changed=bool(layouts))

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
            return old if old.rank == new.rank else SAME
        if old.tag == "empty_list" and new.tag in ("list", "same"):
            return new
        if new.tag == "empty_list" and old.tag in ("list", "same"):
            return old
        raise Blocker("PM605", node, f"`{name}` holds both {_describe(old)} and "
                      f"{_describe(new)}, depending on the path taken")

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
            raise Blocker("PM605", s, "the values of this loop do not settle")
        self._block(s.orelse)

    # -- statements -----------------------------------------------------------------------
    def _block(self, statements) -> None:
        for statement in statements:
            self._statement(statement)

    def _statement(self, s) -> None:
        if isinstance(s, ast.Assign):
            if id(s.value) in self.local_builds:
                return  # `p = jax.pmap(...)`: p is a site of this function
            kind = self.eval(s.value)
            for target in s.targets:
                self._bind(target, kind, s.value)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self._bind(s.target, self.eval(s.value), s.value)
        elif isinstance(s, ast.AugAssign):
            if self.eval(s.value).changed or self.eval(s.target).changed:
                raise Blocker("PM605", s, "an augmented assignment on a per-device value")
        elif isinstance(s, ast.Expr):
            self._expression_statement(s.value)
        elif isinstance(s, ast.For):
            def head():
                iterated = self.eval(s.iter)
                if iterated.tag == "list":
                    self._bind(s.target, iterated.element, s.iter)
                elif iterated.changed:
                    raise Blocker("PM605", s.iter, "a loop over the device axis")
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
                raise Blocker("PM605", target, f"unpacking {_describe(kind)}")
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            if kind.changed or self.eval(target.value).changed:
                raise Blocker("PM605", target, "a per-device value stored into a container "
                              "or attribute")
        else:
            raise Blocker("PM605", target, "an assignment target the global style does not model")

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
                raise Blocker("PM605", call, f"`{name}` is not a list made in this function")
            if name in self.kinds:
                self.kinds[name] = self._join(self.kinds[name], list_of(element), name, call)
            elif element.changed:
                raise Blocker("PM605", call, f"`{name}` is not a list made in this function")
            return
        self.eval(value)

    def _same(self, node) -> None:
        kind = self.eval(node)
        if kind.changed:
            raise Blocker("PM605", node, f"{_describe(kind)} used in a condition or context")

    def _opaque(self, node) -> None:
        """A construct this module does not model: fine only if no per-device value or
        site reaches it."""
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                if child.id in self.sites:
                    raise Blocker("PM603", child, f"`{child.id}` used in a construct the "
                                  "global style does not follow")
                if self.kinds.get(child.id, SAME).changed:
                    raise Blocker("PM605", child, f"`{child.id}` ({_describe(self.kinds[child.id])})"
                                  f" used in a {type(node).__name__}")

    # -- expressions ----------------------------------------------------------------------
    def eval(self, node) -> Kind:
        if isinstance(node, ast.Constant):
            return Kind("same", rank=0) if type(node.value) in (int, float, bool) else SAME
        if isinstance(node, ast.Name):
            if node.id in self.sites:
                raise Blocker("PM603", node, f"`{node.id}` used as a value, not called")
            return self.kinds.get(node.id, SAME)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Attribute):
            if self.eval(node.value).changed:
                raise Blocker("PM605", node, f"`.{node.attr}` of {_describe(self.eval(node.value))}"
                              " (its layout changes)")
            return SAME
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Dict):
            return self._dict(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            kinds = [self.eval(e) for e in node.elts]
            if isinstance(node, ast.List) and not node.elts:
                return Kind("empty_list")
            if any(k.changed for k in kinds):
                if len(set(kinds)) == 1 and kinds[0].tag in ("repl", "merged"):
                    return kinds[0]  # a tuple of stacks of one layout is a tree of them
                if isinstance(node, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in node.elts):
                    return Kind("fields", fields=tuple((f"[{i}]", k) for i, k in enumerate(kinds)))
                raise Blocker("PM605", node, "a per-device value inside a list")
            return SAME
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return self._comprehension(node)
        if isinstance(node, ast.Lambda):
            self._opaque(node)
            return SAME
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr) and self.eval(child).changed:
                raise Blocker("PM605", child, f"{_describe(self.eval(child))} in a "
                              f"{type(node).__name__} expression")
        return SAME

    def _qualified(self, func) -> str:
        return dotted(func, self.module.imported)

    def _call(self, call: ast.Call) -> Kind:
        func = call.func
        name = self._qualified(func)
        if isinstance(func, ast.Name) and func.id in self.sites:
            return self._site_call(call, self.sites[func.id])
        if id(func) in self.inline:
            return self._site_call(call, self.inline[id(func)])
        if name in DEVICE_COUNT and not call.args:
            return Kind("devcount")
        if name in DEVICES and not call.args:
            return Kind("devices")
        if name == "builtins.len" or (isinstance(func, ast.Name) and func.id == "len"):
            if len(call.args) == 1 and self.eval(call.args[0]).tag == "devices":
                return Kind("devcount")
        produced = self._producer(call, name)
        if produced is not None:
            return produced
        consumed = self._consumer(call, name)
        if consumed is not None:
            return consumed
        if isinstance(func, ast.Name) and func.id in self.module.functions and any(
                self.eval(a).tag not in ("same",) for a in call.args if not isinstance(a, ast.Starred)):
            return self._helper_call(call, self.module.functions[func.id])
        # A generic call: nothing per-device may reach it.
        if isinstance(func, ast.Attribute):
            self.eval(func)
        elif not isinstance(func, ast.Name):
            self._same(func)
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            kind = self.eval(argument.value if isinstance(argument, ast.Starred) else argument)
            if kind.changed:
                raise Blocker("PM605", argument, f"{_describe(kind)} passed to "
                              f"`{ast.unparse(func)}`, which the global style does not follow")
        return SAME

    def _helper_call(self, call: ast.Call, helper: ast.FunctionDef) -> Kind:
        """A module function given the device count or stacks (`x, y = make_data(n)`): it is
        followed with those parameter kinds, and its own edits join this function's, when
        nothing else in the module calls it."""
        name = helper.name
        arguments = helper.args
        if (self.module.loads.get(name, 0) != 1 or call.keywords or self.depth >= 2
                or arguments.vararg or arguments.kwarg or arguments.kwonlyargs
                or arguments.posonlyargs or len(call.args) > len(arguments.args)
                or any(isinstance(a, ast.Starred) for a in call.args)
                or helper.decorator_list or name in self.module.callers
                or helper is self.function):
            raise Blocker("PM605", call, f"the device count or a per-device value is passed to "
                          f"`{name}`, which the global style cannot follow (called elsewhere "
                          "too, with keywords, or calling pmap sites itself)")
        parameters = {a.arg: self.eval(value) for a, value in zip(arguments.args, call.args)}
        analysis = CallerAnalysis(helper, self.all_sites, self.module, parameters, self.depth + 1)
        analysis.sites, analysis.inline, analysis.local_builds = {}, {}, set()
        analysis.run_helper()
        self.edits.update(analysis.edits)
        self.helpers.add(name)
        result = None
        for node, kind in analysis.returns:
            result = self._join(result, kind, f"the result of {name}", node)
        return result or SAME

    def run_helper(self) -> None:
        self._block(self.function.body)

    def _is_devcount(self, node) -> bool:
        return self.eval(node).tag == "devcount"

    def _rank_of(self, node) -> int | None:
        kind = self.eval(node)
        return kind.rank if kind.tag == "same" else None

    def _producer(self, call: ast.Call, name: str) -> Kind | None:
        module = self.module
        if name in REPLICATE and call.args and not any(k.arg == "devices" for k in call.keywords):
            if name == "jax.device_put_replicated" and (
                    len(call.args) != 2 or self.eval(call.args[1]).tag != "devices"):
                raise Blocker("PM604", call, "device_put_replicated onto a device list that is "
                              "not all local devices")
            self._need_same(call.args[0])
            self._edit(call, f"{module.jax}.device_put({self.render(call.args[0])}, P())")
            return REPL
        value = replicated_operand(call, name, self._is_devcount, self._rank_of)
        if value is not None:
            self._need_same(value)
            self._edit(call, self.render(value))
            return REPL
        if name in TREE_MAP and len(call.args) == 2 and isinstance(call.args[0], ast.Lambda):
            function, tree = call.args
            body = function.body
            params = [a.arg for a in function.args.args]
            if isinstance(body, ast.Call) and len(params) == 1:
                operand = replicated_operand(body, self._qualified(body.func), self._is_devcount,
                                             lambda node: None)
                if isinstance(operand, ast.Name) and operand.id == params[0]:
                    self._need_same(tree)
                    self._edit(call, self.render(tree))
                    return REPL
        if name in CONSTANT_FILLS and call.args and not any(k.arg == "shape" for k in call.keywords):
            shape = call.args[0]
            rest = None
            if self._is_devcount(shape):
                rest = []
            elif isinstance(shape, ast.Tuple) and shape.elts and self._is_devcount(shape.elts[0]) \
                    and not any(isinstance(e, ast.Starred) for e in shape.elts):
                rest = shape.elts[1:]
            if rest is not None:
                for argument in [*rest, *call.args[1:], *(k.value for k in call.keywords)]:
                    self._need_same(argument)
                self._edit(shape, _tuple_text([self.render(e) for e in rest]))
                return REPL
        if name in SHARD and len(call.args) == 1 and not call.keywords:
            self._need_same(call.args[0])
            self._edit(call, f"{module.jax}.device_put({self.render(call.args[0])}, "
                             f"P({AXIS_PLACEHOLDER}))")
            return Kind("merged")
        if isinstance(call.func, ast.Attribute) and call.func.attr == "reshape" \
                and len(call.args) >= 2 and not call.keywords and self._is_devcount(call.args[0]):
            self._need_same(call.func.value)
            rest = call.args[1:]
            first = rest[0]
            if _is_minus_one(first):
                merged = ["-1", *(self.render(a) for a in rest[1:])]
            else:
                merged = [f"{self.render(call.args[0])} * {_operand(self.render(first))}",
                          *(self.render(a) for a in rest[1:])]
            self._edit(call, f"{_operand(self.render(call.func.value))}.reshape({', '.join(merged)})")
            return Kind("merged", rank=len(call.args))
        if isinstance(call.func, ast.Attribute) and call.func.attr in RNG_DRAWS:
            size = next((k.value for k in call.keywords if k.arg == "size"), None)
            if isinstance(size, ast.Tuple) and len(size.elts) >= 2 and self._is_devcount(size.elts[0]):
                self._same(call.func.value)
                for argument in call.args:
                    self._need_same(argument)
                merged = [f"{self.render(size.elts[0])} * {_operand(self.render(size.elts[1]))}",
                          *(self.render(e) for e in size.elts[2:])]
                text = ", ".join(merged) + ("," if len(merged) == 1 else "")
                self._edit(size, f"({text})")
                return Kind("merged", rank=len(size.elts))
        if name == "jax.device_put_sharded" and len(call.args) == 2:
            return self._device_put_sharded(call)
        return None

    def _device_put_sharded(self, call: ast.Call) -> Kind:
        pieces, devices = call.args
        if self.eval(devices).tag != "devices":
            raise Blocker("PM604", call, "device_put_sharded onto a device list that is not "
                          "all local devices")
        if not (isinstance(pieces, ast.ListComp) and len(pieces.generators) == 1):
            raise Blocker("PM604", pieces, "device_put_sharded of something other than "
                          "`[... x[i] ... for i in range(n)]`")
        generator = pieces.generators[0]
        iterated = generator.iter
        if not (isinstance(generator.target, ast.Name) and not generator.ifs
                and isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name)
                and iterated.func.id == "range" and "range" not in self.module.table.bound_otherwise
                and len(iterated.args) == 1 and self._is_devcount(iterated.args[0])):
            raise Blocker("PM604", pieces, "device_put_sharded of a list not built over "
                          "range(device count)")
        index = generator.target.id
        rows = {}  # the x[i] subscripts: each becomes x itself, merged
        for node in ast.walk(pieces.elt):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) \
                    and node.slice.id == index and isinstance(node.value, ast.Name):
                rows[id(node)] = node
        for node in ast.walk(pieces.elt):
            if isinstance(node, ast.Name) and node.id == index and not any(
                    node is rows[k].slice for k in rows):
                raise Blocker("PM604", node, f"`{index}` used other than as `x[{index}]`")
        saved = dict(self.kinds)
        try:
            substitutes = {}
            for node in rows.values():
                kind = self.eval(node.value)
                if kind.tag != "merged":
                    raise Blocker("PM604", node, f"`{ast.unparse(node)}`: `{node.value.id}` is "
                                  "not a per-device batch the tool can merge")
                substitutes[id(node)] = kind
            self._rows = substitutes
            kind = self.eval(pieces.elt)
        finally:
            self._rows = {}
            self.kinds = saved
        if kind.tag != "merged":
            raise Blocker("PM604", pieces.elt, "the device_put_sharded pieces are not rows of "
                          "a batch the tool can merge")
        self._edit(call, f"{self.module.jax}.device_put({self.render(pieces.elt)}, "
                         f"P({AXIS_PLACEHOLDER}))")
        return kind

    _rows: dict = {}

    def _consumer(self, call: ast.Call, name: str) -> Kind | None:
        func = call.func
        unreplicated = name in UNREPLICATE or (
            isinstance(func, ast.Name) and func.id in self.module.unreplicate_helpers)
        if unreplicated and len(call.args) == 1 and not call.keywords:
            return self._row_zero(call, call.args[0])
        if name in TREE_MAP and len(call.args) == 2 and isinstance(call.args[0], ast.Lambda) \
                and _is_row_zero_lambda(call.args[0]):
            return self._row_zero(call, call.args[1])
        if name in CONSTANT_FILLS and call.args and isinstance(call.args[0], ast.Tuple) \
                and not call.args[0].elts:
            for argument in [*call.args[1:], *(k.value for k in call.keywords)]:
                self._need_same(argument)
            return Kind("same", rank=0)
        if name in AS_ARRAY and call.args:
            kind = self.eval(call.args[0])
            for argument in [*call.args[1:], *(k.value for k in call.keywords)]:
                self._need_same(argument)
            if kind.tag == "list":
                element = kind.element
                if element.tag not in ("repl", "merged"):
                    raise Blocker("PM605", call, "an array of per-device values of mixed layout")
                return dataclasses.replace(element, axis=element.axis + 1,
                                           rank=None if element.rank is None else element.rank + 1)
            return kind
        if name in STACK and len(call.args) == 1 and not call.keywords:
            kind = self.eval(call.args[0])
            if kind.tag == "list" and kind.element.tag in ("repl", "merged"):
                element = kind.element
                return dataclasses.replace(element, axis=element.axis + 1,
                                           rank=None if element.rank is None else element.rank + 1)
        if name in TO_SCALAR or (isinstance(func, ast.Name) and func.id in ("float", "int", "bool")):
            for argument in call.args:
                self._need_same(argument)
            return SAME
        if name in ("jax.tree_util.tree_leaves", "jax.tree.leaves") and len(call.args) == 1:
            kind = self.eval(call.args[0])
            return list_of(kind) if kind.tag in ("repl", "merged") else self._need_same(call.args[0])
        if isinstance(func, ast.Attribute):
            receiver = self.eval(func.value)
            if receiver.tag in ("repl", "merged"):
                if func.attr == "is_deleted" and not call.args:
                    return SAME
                if func.attr == "block_until_ready" and not call.args:
                    return receiver
                if func.attr == "astype" and receiver.tag == "merged":
                    for argument in call.args:
                        self._need_same(argument)
                    return receiver
        if name in REDUCTIONS and len(call.args) == 1:
            kind = self.eval(call.args[0])
            if kind.tag == "merged":
                axis = next((k.value for k in call.keywords if k.arg == "axis"), None)
                if (kind.rank is not None and isinstance(axis, ast.UnaryOp)
                        and isinstance(axis.op, ast.USub) and isinstance(axis.operand, ast.Constant)
                        and type(axis.operand.value) is int
                        and 1 <= axis.operand.value <= kind.rank - 2 and kind.rank - 1 >= 2
                        and len(call.keywords) == 1):
                    return Kind("merged", rank=kind.rank - 1)
                raise Blocker("PM605", call, "a reduction over the batch or device axis of a "
                              "per-device batch")
        return None

    def _row_zero(self, call: ast.Call, operand) -> Kind:
        kind = self.eval(operand)
        if kind.tag != "repl" or kind.axis != 0:
            raise Blocker("PM605", call, f"row 0 of {_describe(kind)}: only a replicated "
                          "output's row 0 becomes direct use")
        self._edit(call, self.render(operand))
        return SAME

    def _subscript(self, node: ast.Subscript) -> Kind:
        if id(node) in self._rows:
            self._edit(node, self.render(node.value))
            return self._rows[id(node)]
        kind = self.eval(node.value)
        index = node.slice
        if kind.tag == "same":
            self._need_same(index)
            return SAME
        if kind.tag == "repl" and kind.axis == 0 and isinstance(index, ast.Constant) \
                and type(index.value) is int and index.value == 0:
            self._edit(node, self.render(node.value))
            return SAME
        if kind.tag in ("repl", "merged") and isinstance(index, ast.Constant) \
                and isinstance(index.value, str):
            return kind  # a leaf of a tree of stacks
        if kind.tag == "fields" and isinstance(index, ast.Constant):
            step = f"[{index.value!r}]" if isinstance(index.value, str) else f"[{index.value}]"
            for key, field in kind.fields:
                if key == step:
                    return field
        if kind.tag == "merged" and kind.rank is not None and isinstance(index, ast.Tuple) \
                and index.elts and isinstance(index.elts[0], ast.Constant) \
                and index.elts[0].value is Ellipsis:
            dropped = 0
            for element in index.elts[1:]:
                if isinstance(element, ast.Slice):
                    for part in (element.lower, element.upper, element.step):
                        if part is not None:
                            self._need_same(part)
                elif isinstance(element, ast.Constant) and type(element.value) is int:
                    dropped += 1
                else:
                    raise Blocker("PM605", element, "an index into a per-device batch")
            if kind.rank - dropped >= 2 and len(index.elts) - 1 <= kind.rank - 2:
                return Kind("merged", rank=kind.rank - dropped)
        raise Blocker("PM605", node, f"`{ast.unparse(node)}` indexes {_describe(kind)}")

    def _binop(self, node: ast.BinOp) -> Kind:
        left, right = self.eval(node.left), self.eval(node.right)
        if not left.changed and not right.changed:
            return SAME
        if isinstance(node.op, ast.MatMult) and left.tag == "merged" and not right.changed:
            if left.rank is not None and left.rank >= 3:
                return Kind("merged")
            raise Blocker("PM605", node, "a matrix product on a per-device batch of unknown "
                          "or too small rank")
        elementwise = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
        if isinstance(node.op, elementwise):
            for kind, other in ((left, node.right), (right, node.left)):
                if kind.tag == "merged" and isinstance(other, ast.Constant) \
                        and type(other.value) in (int, float):
                    return kind
            if left.tag == right.tag == "merged" and left.rank == right.rank is not None:
                return left
        raise Blocker("PM605", node, f"`{ast.unparse(node)}` combines {_describe(left)} and "
                      f"{_describe(right)}")

    def _dict(self, node: ast.Dict) -> Kind:
        fields = []
        for key, value in zip(node.keys, node.values):
            kind = self.eval(value)
            if key is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                if kind.changed:
                    raise Blocker("PM605", value, "a per-device value under a computed dict key")
                if key is not None:
                    self.eval(key)
                continue
            fields.append((f"[{key.value!r}]", kind))
        kinds = {k for _, k in fields}
        if not any(k.changed for k in kinds):
            return SAME
        if len(kinds) == 1 and len(fields) == len(node.keys):
            return kinds.pop()  # a tree of stacks of one layout
        return Kind("fields", fields=tuple(fields))

    def _comprehension(self, node) -> Kind:
        saved = dict(self.kinds)
        try:
            for generator in node.generators:
                iterated = self.eval(generator.iter)
                element = iterated.element if iterated.tag == "list" else SAME
                if iterated.changed and iterated.tag != "list":
                    raise Blocker("PM605", generator.iter, "a comprehension over the device axis")
                for name in ast.walk(generator.target):
                    if isinstance(name, ast.Name):
                        self.kinds[name.id] = element
                for condition in generator.ifs:
                    self._same(condition)
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            kinds = [self.eval(p) for p in parts]
        finally:
            self.kinds = saved
        if any(k.changed for k in kinds):
            raise Blocker("PM605", node, "a comprehension that builds per-device values")
        return SAME

    def _need_same(self, node) -> Kind:
        kind = self.eval(node)
        if kind.changed:
            raise Blocker("PM605", node, f"{_describe(kind)} where a plain value is expected")
        return SAME

    # -- the step itself ------------------------------------------------------------------
    def _site_call(self, call: ast.Call, site: Site) -> Kind:
        if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            raise Blocker("PM603", call, f"{site.label} called with keywords or *args")
        if len(call.args) != len(site.params):
            raise Blocker("PM603", call, f"{site.label} called with {len(call.args)} arguments")
        specs, replicated = [], set()
        for position, (argument, axis) in enumerate(zip(call.args, site.in_axes)):
            kind = self.eval(argument)
            if axis is None:
                if kind.changed:
                    raise Blocker("PM604", argument, f"argument {position} of {site.label} is "
                                  "not mapped (in_axes None) but holds a per-device value")
                specs.append("P()")
                replicated.add(site.params[position])
            elif kind.tag == "repl" and kind.axis == 0:
                specs.append("P()")
                replicated.add(site.params[position])
            elif kind.tag == "merged" and kind.axis == 0:
                specs.append(f"P({AXIS_PLACEHOLDER})")
            else:
                raise Blocker("PM604", argument, f"argument {position} of {site.label} "
                              f"(`{ast.unparse(argument)}`): its producer is not recognised as "
                              "a replicated value or a per-device batch")
        if site.function_node is not None:
            # A closure or partial keyword sees the caller's value as it is: it must keep
            # its layout.
            for node in ast.walk(site.function_node):
                if isinstance(node, ast.Name) and self.kinds.get(node.id, SAME).changed:
                    raise Blocker("PM605", node, f"`{node.id}` ({_describe(self.kinds[node.id])})"
                                  f" is closed over by the function `{site.name}` maps")
        specs = tuple(specs)
        if self.specs.setdefault(site.key, specs) != specs:
            raise Blocker("PM604", call, f"{site.label} is called with different layouts")
        varying = self.module.body_analysis(site).first_varying_output(replicated)
        if varying is None:
            mode = REPLICATED_OUT
        elif site.out_none:
            raise Blocker("PM606", varying, f"{site.label} has out_axes=None but a result "
                          "is not provably the same on every device")
        elif not self.module.can_stack_results(site):
            raise Blocker("PM606", varying, f"a result of `{site.name}` is per-device and its "
                          "function is shared with other code, so its results cannot be given "
                          "back with their device axis")
        else:
            mode = STACKED_OUT
        if self.modes.setdefault(site.key, mode) != mode:
            raise Blocker("PM606", call, f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        if mode == STACKED_OUT or site.out_none:
            return SAME  # the original's layout: stacked per-device rows, or out_axes=None
        return REPL

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
        found = {tuple(_layouts_of(kind, "", node)) for node, kind in self.returns}
        if len(found) > 1:
            raise Blocker("PM605", self.function, "its returns have different layouts")
        return found.pop() if found else ()


def _layouts_of(kind: Kind, path: str, node) -> list[OutputLayout]:
    if kind.tag == "repl":
        return [OutputLayout(path, REPLICATED, kind.axis)]
    if kind.tag == "merged":
        return [OutputLayout(path, MERGED, kind.axis)]
    if kind.tag == "fields":
        return [layout for step, field in kind.fields for layout in _layouts_of(field, path + step, node)]
    if kind.tag == "list":
        raise Blocker("PM605", node, "returns a list of per-device values")
    return []


def replicated_operand(call: ast.Call, name: str, is_devcount, rank_of) -> ast.AST | None:
    """x of `jnp.stack([x] * n)`, `np.broadcast_to(x, (n,) + x.shape)` or, for a 0-d x,
    `np.broadcast_to(x, (n,))` (n: device count)."""
    if name in STACK and len(call.args) == 1 and not call.keywords:
        items = call.args[0]
        if isinstance(items, ast.BinOp) and isinstance(items.op, ast.Mult):
            for listed, count in ((items.left, items.right), (items.right, items.left)):
                if isinstance(listed, ast.List) and len(listed.elts) == 1 and is_devcount(count):
                    return listed.elts[0]
    if name in BROADCAST_TO and len(call.args) == 2 and not call.keywords:
        value, shape = call.args
        leading = None
        if isinstance(shape, ast.BinOp) and isinstance(shape.op, ast.Add) \
                and isinstance(shape.left, ast.Tuple) and len(shape.left.elts) == 1:
            leading, rest = shape.left.elts[0], shape.right
        elif isinstance(shape, ast.Tuple) and len(shape.elts) == 2 \
                and isinstance(shape.elts[1], ast.Starred):
            leading, rest = shape.elts[0], shape.elts[1].value
        elif isinstance(shape, ast.Tuple) and len(shape.elts) == 1 and is_devcount(shape.elts[0]) \
                and rank_of(value) == 0:
            return value
        if leading is not None and is_devcount(leading) and isinstance(rest, ast.Attribute) \
                and rest.attr == "shape" and _pure(value) and ast.dump(rest.value) == ast.dump(value):
            return value
    return None


def _pure(node) -> bool:
    """A name, or attributes / constant subscripts of one: evaluating it twice is harmless."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            return False
        node = node.value
    return isinstance(node, ast.Name)


def _is_row_zero_lambda(function: ast.Lambda) -> bool:
    params = [a.arg for a in function.args.args]
    body = function.body
    return (len(params) == 1 and isinstance(body, ast.Subscript)
            and isinstance(body.value, ast.Name) and body.value.id == params[0]
            and isinstance(body.slice, ast.Constant) and body.slice.value == 0
            and type(body.slice.value) is int)


def _is_minus_one(node) -> bool:
    return (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and node.operand.value == 1
            and type(node.operand.value) is int) or (
        isinstance(node, ast.Constant) and node.value == -1 and type(node.value) is int)


def quoted(text: str) -> str:
    """A string literal in double quotes, as most Python code writes them."""
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


def _tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _operand(text: str) -> str:
    """`text` safe as the operand of `*` or `.`: parenthesised unless it is one atom."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text})"
    atoms = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value < 0:
        return f"({text})"
    return text if isinstance(node, atoms) else f"({text})"


def _describe(kind: Kind) -> str:
    return {
        "same": "a plain value",
        "repl": "a replicated stack (pmap's device axis)",
        "merged": "a per-device batch",
        "list": "a list of per-device values",
        "empty_list": "a list",
        "devcount": "the device count",
        "devices": "the device list",
        "fields": "a tree of per-device values of mixed layout",
    }[kind.tag]
