"""Expressions in a caller of global sites: what kind of value each one is (`eval`), calls
of helpers and of the global sites themselves, subscripts, arithmetic, containers."""

from __future__ import annotations

import ast

from transforms.global_view.replication import NotProvable
from transforms.global_view.sites import Blocker, Site, dotted
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    CONSTANT_FILLS,
    DEVICE_COUNT,
    DEVICES,
    NONE_OUT,
    REPL,
    REPLICATED_OUT,
    SAME,
    STACKED_OUT,
    Kind,
    _describe,
    quoted,
    stacked_at,
)


class ExpressionsMixin:
    """`CallerAnalysis`'s evaluation of expressions (dataflow.py holds the state it reads)."""

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
        analysis = type(self)(helper, self.all_sites, self.module, parameters, self.depth + 1)
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
        if kind.tag == "repl" and kind.axis == 0 and isinstance(index, ast.Tuple) \
                and len(index.elts) >= 2 and _is_full_slice(index.elts[0]) \
                and not any(isinstance(e, ast.Starred) for e in index.elts):
            # `stack[:, None]`: the same on every row, so the row itself is `row[None]`.
            for element in index.elts[1:]:
                self._need_same(element)
            rest = ", ".join(self.render(e) for e in index.elts[1:])
            self._edit(node, f"{self.render(node.value)}[{rest}]")
            return kind
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
            raise Blocker("PM603", call, f"{site.label} called with keywords or *args (pmap "
                          "maps keyword arguments on axis 0; one in_specs tuple describes "
                          "positional calls only)")
        if len(call.args) != len(site.params):
            raise Blocker("PM603", call, f"{site.label} called with {len(call.args)} of its "
                          f"{len(site.params)} parameters (pmap fills the rest from defaults "
                          "per call; one in_specs tuple needs every call to pass them all)")
        self._placement(site)
        if any(type(a) is int and a >= 1 for i, a in enumerate(site.in_axes)
               if i not in site.static) and not (self.module.can_stack_results(site)
                                                 and self.module.starts_a_line(site.body)):
            raise Blocker("PM602", site.node, f"{site.label} maps an argument on an axis other "
                          "than 0 and its function is shared with other code (or its first "
                          "statement shares a line), so the body cannot be given the statement "
                          "that drops that axis")
        specs, replicated = [], set()
        for position, (argument, axis) in enumerate(zip(call.args, site.in_axes)):
            kind = self.eval(argument)
            if position in site.static:  # jit's static argument: no spec, a plain value
                if kind.changed:
                    raise Blocker("PM604", argument, f"static argument {position} of "
                                  f"{site.label} holds {_describe(kind)}")
                replicated.add(site.params[position])
            else:
                spec, whole = self._argument_spec(argument, kind, axis, f"argument {position} "
                                                  f"of {site.label}")
                specs.append(spec)
                if whole:
                    replicated.add(site.params[position])
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
        if site.out_tree is not None:
            return self._result_tree(call, site, replicated)
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


    def _argument_spec(self, argument, kind: Kind, axis, what: str) -> tuple[str, bool]:
        """(in_specs text, the same on every device) of one argument whose in_axes entry is
        `axis`: 0 / None, or a dict / tuple tree of them matched against the argument's
        fields (a dict or tuple literal of values of known layouts)."""
        if isinstance(axis, (dict, tuple)):
            if isinstance(axis, dict):
                steps = [(f"[{key!r}]", key, sub) for key, sub in axis.items()]
            else:
                steps = [(f"[{i}]", i, sub) for i, sub in enumerate(axis)]
            fields = dict(kind.fields) if kind.tag == "fields" else None
            if fields is not None and sorted(fields) != sorted(step for step, _, _ in steps):
                raise Blocker("PM604", argument, f"{what}: its fields do not match the in_axes "
                              "tree")
            if fields is None and kind.tag == "fields":
                raise Blocker("PM604", argument, f"{what}: not a tree the tool can match")
            parts, whole = [], True
            for step, key, sub in steps:
                spec, same = self._argument_spec(argument, fields[step] if fields else kind,
                                                 sub, what)
                parts.append(f"{quoted(key)}: {spec}" if isinstance(axis, dict) else spec)
                whole = whole and same
            text = "{" + ", ".join(parts) + "}" if isinstance(axis, dict) else \
                "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
            return text, whole
        if kind.tag == "fields":  # one axis for a tuple / dict of values of mixed layouts
            steps = [step for step, _ in kind.fields]
            if steps == [f"[{i}]" for i in range(len(steps))]:
                axis = tuple(axis for _ in steps)
            elif all(step.startswith("['") for step in steps):
                axis = {ast.literal_eval(step[1:-1]): axis for step in steps}
            else:
                raise Blocker("PM604", argument, f"{what}: not a tree the tool can match")
            return self._argument_spec(argument, kind, axis, what)
        if axis is None:
            if kind.changed:
                raise Blocker("PM604", argument, f"{what} is not mapped (in_axes None) but "
                              "holds a per-device value")
            return "P()", True
        if kind.tag == "repl" and kind.axis == 0 and axis == 0:
            return "P()", True
        if kind.tag == "merged" and kind.axis == 0 and axis == 0:
            return f"P({AXIS_PLACEHOLDER})", False
        if type(axis) is int and axis >= 1 and not kind.changed:
            # A value the migration leaves in pmap's layout, mapped on axis k: shard_map
            # splits the same axis (the body's first statement squeezes it, see rewrite),
            # one slice per device only if that axis is the device count.
            if not self._sized_by_devcount(argument, axis):
                raise Blocker("PM604", argument, f"{what} is mapped on axis {axis}, which is "
                              "not provably the device count (the mesh's size)")
            return f"P({'None, ' * axis}{AXIS_PLACEHOLDER})", False
        raise Blocker("PM604", argument, f"{what} (`{ast.unparse(argument)}`): its producer "
                      "is not recognised as a replicated value or a per-device batch")

    def _sized_by_devcount(self, node, axis: int) -> bool:
        """`node` is built here with the device count at `axis` of its shape: a numpy draw
        `size=(..., n, ...)`, a fill `np.zeros((..., n, ...))` or `x.reshape(..., n, ...)`,
        possibly followed by `.astype(...)`."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "astype":
            node = node.func.value
        if not isinstance(node, ast.Call):
            return False
        size = next((k.value for k in node.keywords if k.arg in ("size", "shape")), None)
        if size is None and isinstance(node.func, ast.Attribute) and node.func.attr == "reshape":
            size = node.args[0] if len(node.args) == 1 else ast.Tuple(elts=node.args)
        elif size is None and self._qualified(node.func) in CONSTANT_FILLS and node.args:
            size = node.args[0]
        return isinstance(size, ast.Tuple) and len(size.elts) > axis \
            and not any(isinstance(e, ast.Starred) for e in size.elts[:axis + 1]) \
            and self._is_devcount(size.elts[axis])

    def _placement(self, site: Site) -> None:
        """pmap's devices= and axis_size= are exact under the caller's mesh only when they
        are every device (jax.devices() / jax.local_devices(): one process) and the device
        count. A module-level site's option is read only as such a call, not through names
        of this function."""
        for option, node in site.placement.items():
            direct = site.owner is not None or isinstance(node, ast.Call)
            want = "devices" if option == "devices" else "devcount"
            try:
                kind = self.eval(node) if direct else None
            except Blocker:
                kind = None
            if kind is None or kind.tag != want:
                what = "every device" if option == "devices" else "the device count"
                raise Blocker("PM602", node, f"{site.label} has {option}="
                              f"`{ast.unparse(node)}`, not provably {what}: under the caller's "
                              "mesh over all devices it would run on different devices")

    def _result_tree(self, call: ast.Call, site: Site, replicated: set[str]) -> Kind:
        """`out_axes=(0, None, ...)`: per result, None needs a proven-replicated value (P(),
        unstacked as in the original); 0 is P() when proven (a replicated stack in the
        original) and otherwise keeps its device axis (expanded in the body, P(axis))."""
        tree = site.out_tree
        if isinstance(tree, int):  # one out_axes k >= 1: the result keeps pmap's layout
            if not self.module.can_stack_results(site):
                raise Blocker("PM606", site.node, f"`{site.name}` has out_axes={tree} and its "
                              "function is shared with other code, so its results cannot be "
                              "given back with their device axis")
            mode = stacked_at(tree)
            if self.modes.setdefault(site.key, mode) != mode:
                raise Blocker("PM606", call, f"{site.label} is called with different layouts")
            return SAME
        axes = dict(enumerate(tree)) if isinstance(tree, tuple) else tree
        try:
            varying = self.module.body_analysis(site).varying_results(replicated, list(axes))
        except NotProvable as error:
            raise Blocker("PM606", error.node, f"{site.label}: {error.why}") from None
        modes, fields = [], []
        for position, axis in axes.items():
            node = varying[position]
            if axis not in (0, None):  # out_axes k >= 1: keeps pmap's layout, P(None, ..., axis)
                if not self.module.can_stack_results(site):
                    raise Blocker("PM606", site.node, f"result {position!r} of `{site.name}` has "
                                  f"out_axes {axis} and its function is shared with other code")
                modes.append(stacked_at(axis))
            elif node is None:
                modes.append(NONE_OUT if axis is None else REPLICATED_OUT)
            elif axis is None:
                raise Blocker("PM606", node, f"result {position} of {site.label} has out_axes "
                              "None but is not provably the same on every device")
            elif not self.module.can_stack_results(site):
                raise Blocker("PM606", node, f"result {position} of `{site.name}` is per-device "
                              "and its function is shared with other code, so it cannot be "
                              "given back with its device axis")
            else:
                modes.append(STACKED_OUT)
            fields.append((f"[{position!r}]", REPL if modes[-1] == REPLICATED_OUT else SAME))
        mode = tuple(modes)
        if self.modes.setdefault(site.key, mode) != mode:
            raise Blocker("PM606", call, f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        if not any(kind.changed for _, kind in fields):
            return SAME
        return Kind("fields", fields=tuple(fields))


def _is_full_slice(node) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None \
        and node.step is None
