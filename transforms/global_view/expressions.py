"""Expressions in a caller of global sites: what kind of value each one is (`eval`), calls
of helpers and of the global sites themselves, subscripts, arithmetic, containers."""

from __future__ import annotations

import ast

from transforms.codes.global_view import (
    CALLERS_UNSEEN,
    CONSUMER_UNKNOWN,
    OPTIONS,
    OUTPUT_NOT_REPLICATED,
    PRODUCER_UNKNOWN,
)
from transforms.global_view.ranks import (
    array_results,
    leading_axis_transparent,
    least_result_ranks,
)
from transforms.global_view.replication import NotProvable
from transforms.global_view.sites import Blocker, Site, dotted
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    CONSTANT_FILLS,
    DEVICE_COUNT,
    DEVICES,
    MERGED_OUT,
    NONE_OUT,
    REPL,
    REPLICATED_OUT,
    SAME,
    SCALARS_OUT,
    STACKED_OUT,
    Kind,
    describe,
    least_rank,
    list_of,
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
                raise Blocker(CALLERS_UNSEEN, node, f"`{node.id}` used as a value, not called")
            return self.kinds.get(node.id, SAME)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Attribute):
            held = self._instance_attribute(node)
            if held is not None:
                return held
            shard = _shard_data(node)
            if shard is not None:
                return self._shard_data(node, shard, None)
            if node.attr == "shape" and isinstance(node.value, ast.Attribute) \
                    and _shard_data(node.value) is not None:
                return self._shard_data(node.value, _shard_data(node.value), node)
            if self.eval(node.value).changed:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              f"`.{node.attr}` of {describe(self.eval(node.value))}"
                              " (its layout changes)")
            return SAME
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
                node.ops[0], (ast.Lt, ast.Gt, ast.LtE, ast.GtE, ast.Eq, ast.NotEq)):
            return self._elementwise(node, [node.left, node.comparators[0]])
        if isinstance(node, ast.Dict):
            return self._dict(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            kinds = [self.eval(e) for e in node.elts]
            if isinstance(node, ast.List) and not node.elts:
                return Kind("empty_list")
            if any(k.changed for k in kinds):
                # A tuple or list of stacks stays a sequence: its `[0]` is its first element.
                if not any(isinstance(e, ast.Starred) for e in node.elts):
                    return Kind("fields", fields=tuple((f"[{i}]", k) for i, k in enumerate(kinds)))
                raise Blocker(CONSUMER_UNKNOWN, node, "a per-device value inside a list")
            return SAME
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return self._comprehension(node)
        if isinstance(node, ast.Lambda):
            self._opaque(node)
            return SAME
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr) and self.eval(child).changed:
                raise Blocker(CONSUMER_UNKNOWN, child, f"{describe(self.eval(child))} in a "
                              f"{type(node).__name__} expression")
        return SAME

    def _shard_data(self, node: ast.Attribute, array, shape: ast.Attribute | None) -> Kind:
        """`x.addressable_shards[k].data`: pmap's shard k is the (1, ...) row k of its stack.
        Of a replicated stack that row is the migrated value itself. Of a batch placed with
        P(axis) the migrated shard k is block k without the leading 1: its `.shape` is given
        back as `(1, *shape)` (an op on the one-device shard would not run under the mesh)."""
        kind = self.eval(array)
        if kind.tag == "repl":
            return kind
        if kind.tag == "merged" and kind.axis == 0 and kind.placed and least_rank(kind) >= 2:
            if shape is None:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              "a shard of a per-device batch: the migrated shard "
                              "is the device's block without pmap's leading axis of 1")
            self._edit(shape, f"(1, *{self.render(shape)})")
            return SAME
        if kind.changed:
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"`.addressable_shards` of {describe(kind)} that is "
                          "not known to be placed with P(axis) (its layout changes)")
        return SAME

    def _unmergeable(self, argument) -> str | None:
        """Why a mapped argument built from the device count cannot be merged, if it is:
        `jax.random.split(key, n)` or `np.arange(n)` give one key or one scalar per device,
        and a per-device key or scalar has no batch axis to merge the device axis into."""
        producer = self.producers.get(argument.id) if isinstance(argument, ast.Name) else argument
        if not isinstance(producer, ast.Call) or not any(
                isinstance(n, ast.Name) and self.kinds.get(n.id, SAME).tag == "devcount"
                for a in producer.args for n in ast.walk(a)):
            return None
        text = ast.unparse(producer)
        text = text if len(text) <= 60 else text[:57] + "..."
        if self._qualified(producer.func) in ("jax.random.split", "jax.random.key_split"):
            return (f"per-device RNG keys (`{text}`, line {producer.lineno}): a key per device "
                    "has no batch axis to merge the device axis into")
        if self._qualified(producer.func) in ("numpy.arange", "jax.numpy.arange"):
            return (f"per-device scalars (`{text}`, line {producer.lineno}): one number per "
                    "device has no batch axis to merge the device axis into")
        return (f"`{text}` (line {producer.lineno}) is built from the device count, but not by "
                "a producer the tool recognises as a per-device batch (a reshape to "
                "(n, -1, ...), shard, device_put_sharded, a random draw of size (n, ...))")

    def _qualified(self, func) -> str:
        return dotted(func, self.module.imported)

    def _call(self, call: ast.Call) -> Kind:
        func = call.func
        held = self._instance_call(call)
        if held is not None:
            return held
        name = self._qualified(func)
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) \
                and func.func.id in self.sites and self.sites[func.func.id].factory:
            for argument in [*func.args, *(k.value for k in func.keywords)]:
                kind = self.eval(argument.value if isinstance(argument, ast.Starred) else argument)
                if kind.changed:
                    raise Blocker(CONSUMER_UNKNOWN, argument,
                                  f"{describe(kind)} passed to the pmap "
                                  f"factory `{func.func.id}`")
            return self._site_call(call, self.sites[func.func.id])
        if isinstance(func, ast.Name) and func.id in self.sites:
            if self.sites[func.id].factory:
                raise Blocker(CALLERS_UNSEEN, call,
                              f"the pmap factory `{func.id}` called other than "
                              f"as `{func.id}(...)(...)`")
            return self._site_call(call, self.sites[func.id])
        if id(func) in self.inline:
            return self._site_call(call, self.inline[id(func)])
        if name in DEVICE_COUNT and not call.args:
            return Kind("devcount")
        if name in DEVICES and not call.args:
            return Kind("devices")
        if (name == "builtins.next" or (isinstance(func, ast.Name) and func.id == "next"
                                        and "next" not in self.module.table.bound_otherwise)) \
                and len(call.args) == 1 and not call.keywords:
            kind = self.eval(call.args[0])
            if kind.tag == "iterator":
                return kind.element
        if name == "builtins.len" or (isinstance(func, ast.Name) and func.id == "len"):
            if len(call.args) == 1 and self.eval(call.args[0]).tag == "devices":
                return Kind("devcount")
        produced = self._producer(call, name)
        if produced is not None:
            self.produced[id(call)] = name
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
                raise Blocker(CONSUMER_UNKNOWN, argument, f"{describe(kind)} passed to "
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
            raise Blocker(CONSUMER_UNKNOWN, call,
                          f"the device count or a per-device value is passed to "
                          f"`{name}`, which the global style cannot follow (called elsewhere "
                          "too, with keywords, or calling pmap sites itself)")
        generator = _is_generator(helper)
        if generator:
            own = {id(s.value) for s in ast.walk(helper) if isinstance(s, ast.Expr)}
            odd = next((n for n in ast.walk(helper) if isinstance(n, ast.YieldFrom) or (
                isinstance(n, ast.Yield) and (id(n) not in own or n.value is None))), None)
            if odd is not None:
                raise Blocker(CONSUMER_UNKNOWN, odd,
                              f"`{name}` is a generator given the device count or "
                              "per-device values, and this yield is not a `yield value` "
                              "statement, so what it hands out is not followed")
        parameters = {a.arg: self.eval(value) for a, value in zip(arguments.args, call.args)}
        analysis = type(self)(helper, self.all_sites, self.module, parameters, self.depth + 1)
        analysis.sites, analysis.inline, analysis.local_builds = {}, {}, set()
        analysis.run_helper()
        self.edits.update(analysis.edits)
        self.helpers.add(name)
        result = None
        if generator:
            if any(node.value is not None for node, _ in analysis.returns):
                raise Blocker(CONSUMER_UNKNOWN, call,
                              f"`{name}` is a generator that also returns a value")
            for node, kind in analysis.yields:
                result = self._join(result, kind, f"what {name} yields", node)
            return Kind("iterator", element=result) if result and result.changed else SAME
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
        if id(node) in self.container_rows and kind.tag in ("repl", "merged"):
            return kind  # one tree of a list of trees: the same layout
        if kind.tag == "repl" and kind.axis == 0 and isinstance(index, ast.Constant) \
                and type(index.value) is int and index.value == 0:
            if kind.tree:
                raise Blocker(CONSUMER_UNKNOWN, node,
                              f"`{ast.unparse(node)}`: the step's result may be a "
                              "tuple or list of stacks (then this is its first element, not "
                              "device 0's row); its code does not show one array")
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
                    raise Blocker(CONSUMER_UNKNOWN, element, "an index into a per-device batch")
            if kind.rank - dropped >= 2 and len(index.elts) - 1 <= kind.rank - 2:
                return Kind("merged", rank=kind.rank - dropped)
        raise Blocker(CONSUMER_UNKNOWN, node, f"`{ast.unparse(node)}` indexes {describe(kind)}")

    def _binop(self, node: ast.BinOp) -> Kind:
        left, right = self.eval(node.left), self.eval(node.right)
        if not left.changed and not right.changed:
            return SAME
        if isinstance(node.op, ast.MatMult) and left.tag == "merged" and not right.changed:
            if left.rank is not None and left.rank >= 3:
                return Kind("merged")
            raise Blocker(CONSUMER_UNKNOWN, node,
                          "a matrix product on a per-device batch of unknown "
                          "or too small rank")
        elementwise = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
        if isinstance(node.op, elementwise):
            for kind, other in ((left, node.right), (right, node.left)):
                if kind.tag == "merged" and isinstance(other, ast.Constant) \
                        and type(other.value) in (int, float):
                    return kind
            if left.tag == right.tag == "merged" and left.rank == right.rank is not None:
                return left
        raise Blocker(CONSUMER_UNKNOWN, node,
                      f"`{ast.unparse(node)}` combines {describe(left)} and "
                      f"{describe(right)}")

    def _elementwise(self, node, operands) -> Kind:
        """An elementwise comparison or `where` of per-device batches of one known rank and
        numbers: the merged batch gives the merged result, row for row."""
        kinds = [self.eval(operand) for operand in operands]
        if not any(kind.changed for kind in kinds):
            return SAME
        ranks = {kind.rank for kind in kinds if kind.changed}
        numbers = all(isinstance(o, ast.Constant) and type(o.value) in (int, float, bool)
                      or (isinstance(o, ast.UnaryOp) and isinstance(o.operand, ast.Constant)
                          and type(o.operand.value) in (int, float))
                      for o, kind in zip(operands, kinds) if not kind.changed)
        if all(k.tag == "merged" and k.axis == 0 for k in kinds if k.changed) and numbers \
                and len(ranks) == 1 and None not in ranks:
            return Kind("merged", rank=ranks.pop())
        raise Blocker(CONSUMER_UNKNOWN, node,
                      f"`{ast.unparse(node)}` combines per-device values with "
                      "values other than numbers or batches of the same rank")

    def _dict(self, node: ast.Dict) -> Kind:
        fields = []
        for key, value in zip(node.keys, node.values):
            kind = self.eval(value)
            if key is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                if kind.changed:
                    raise Blocker(CONSUMER_UNKNOWN, value,
                                  "a per-device value under a computed dict key")
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
        per_field = self._over_fields(node)
        if per_field is not None:
            return per_field
        saved = dict(self.kinds)
        try:
            for generator in node.generators:
                iterated = self.eval(generator.iter)
                element = iterated.element if iterated.tag in ("list", "iterator") else SAME
                if iterated.changed and iterated.tag not in ("list", "iterator"):
                    raise Blocker(CONSUMER_UNKNOWN, generator.iter,
                                  "a comprehension over the device axis")
                for name in ast.walk(generator.target):
                    if isinstance(name, ast.Name):
                        self.kinds[name.id] = element
                for condition in generator.ifs:
                    self._same(condition)
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            kinds = [self.eval(p) for p in parts]
        finally:
            self.kinds = saved
        if isinstance(node, ast.ListComp) and kinds[0].tag in ("repl", "merged") \
                and len(node.generators) == 1:
            return list_of(kinds[0])  # `[np.asarray(l) for l in losses]`: a list of them
        if any(k.changed for k in kinds):
            raise Blocker(CONSUMER_UNKNOWN, node, "a comprehension that builds per-device values")
        return SAME

    def _over_fields(self, node) -> Kind | None:
        """`{k: f(v) for k, v in tree.items()}` over a dict of values of mixed layouts: `f` is
        followed once per entry, and must read the same (edits included) for each."""
        if not (isinstance(node, ast.DictComp) and len(node.generators) == 1):
            return None
        generator = node.generators[0]
        iterated, target = generator.iter, generator.target
        if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute)
                and iterated.func.attr == "items" and not iterated.args and not iterated.keywords
                and isinstance(target, ast.Tuple) and len(target.elts) == 2
                and all(isinstance(e, ast.Name) for e in target.elts)
                and not generator.ifs and not generator.is_async
                and isinstance(node.key, ast.Name) and node.key.id == target.elts[0].id):
            return None
        tree = self.eval(iterated.func.value) if not isinstance(iterated.func.value, ast.Attribute) \
            else SAME
        if tree.tag != "fields" or not all(step.startswith("['") for step, _ in tree.fields):
            return None
        key, value = target.elts[0].id, target.elts[1].id
        if any(isinstance(n, ast.Name) and n.id == key for n in ast.walk(node.value)):
            raise Blocker(CONSUMER_UNKNOWN, node,
                          "a comprehension over per-device values that reads "
                          "their keys")
        saved = dict(self.kinds)
        before = dict(self.edits)
        fields, texts = [], set()
        try:
            for step, field in tree.fields:
                self.edits = dict(before)
                self.kinds[value] = field
                fields.append((step, self.eval(node.value)))
                texts.add(self.render(node.value))
        finally:
            self.kinds = saved
        if len(texts) > 1:
            raise Blocker(CONSUMER_UNKNOWN, node.value,
                          "a comprehension whose migrated form differs "
                          "between entries of different layouts")
        return Kind("fields", fields=tuple(fields))

    def _need_same(self, node) -> Kind:
        kind = self.eval(node)
        if kind.changed:
            raise Blocker(CONSUMER_UNKNOWN, node,
                          f"{describe(kind)} where a plain value is expected")
        return SAME

    # -- the step itself ------------------------------------------------------------------
    def _site_call(self, call: ast.Call, site: Site) -> Kind:
        self.site_calls[id(call)] = site
        if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            raise Blocker(CALLERS_UNSEEN, call,
                          f"{site.label} called with keywords or *args (pmap "
                          "maps keyword arguments on axis 0; one in_specs tuple describes "
                          "positional calls only)")
        if len(call.args) != len(site.params):
            raise Blocker(CALLERS_UNSEEN, call,
                          f"{site.label} called with {len(call.args)} of its "
                          f"{len(site.params)} parameters (pmap fills the rest from defaults "
                          "per call; one in_specs tuple needs every call to pass them all)")
        self._placement(site)
        if any(type(a) is int and a >= 1 for i, a in enumerate(site.in_axes)
               if i not in site.static) and not (self.module.can_stack_results(site)
                                                 and self.module.starts_a_line(site.body)):
            raise Blocker(OPTIONS, site.node, f"{site.label} maps an argument on an axis other "
                          "than 0 and its function is shared with other code (or its first "
                          "statement shares a line), so the body cannot be given the statement "
                          "that drops that axis")
        specs, replicated, ranks, scalars = [], set(), {}, False
        for position, (argument, axis) in enumerate(zip(call.args, site.in_axes)):
            kind = self.eval(argument)
            if axis is not None and kind.tag == "merged" and least_rank(kind):
                ranks[site.params[position]] = least_rank(kind) - 1
            if position in site.static:  # jit's static argument: no spec, a plain value
                if kind.changed:
                    raise Blocker(PRODUCER_UNKNOWN, argument, f"static argument {position} of "
                                  f"{site.label} holds {describe(kind)}")
                replicated.add(site.params[position])
            elif axis == 0 and kind.scalars and self.per_device_scalars \
                    and leading_axis_transparent(site, self.module.imported):
                specs.append(f"P({AXIS_PLACEHOLDER})")  # each device sees its number as (1,)
                scalars = True
            else:
                spec, whole = self._argument_spec(argument, kind, axis, f"argument {position} "
                                                  f"of {site.label}")
                specs.append(spec)
                if whole:
                    replicated.add(site.params[position])
        if site.function_node is not None and not site.factory and not site.holder:
            # A closure or partial keyword sees the caller's value as it is: it must keep
            # its layout.
            for node in ast.walk(site.function_node):
                if isinstance(node, ast.Name) and self.kinds.get(node.id, SAME).changed:
                    raise Blocker(CONSUMER_UNKNOWN, node,
                                  f"`{node.id}` ({describe(self.kinds[node.id])})"
                                  f" is closed over by the function `{site.name}` maps")
        specs = tuple(specs)
        if self.specs.setdefault(site.key, specs) != specs:
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} is called with different layouts")
        if scalars:
            if site.out_tree is not None:
                raise Blocker(OPTIONS, site.node, f"{site.label} has out_axes and takes one "
                              "number per device")
            return self._scalars_call(call, site, tuple(specs))
        if site.out_tree is not None:
            return self._result_tree(call, site, replicated)
        varying = self.module.body_analysis(site).first_varying_output(replicated)
        least = least_result_ranks(site, ranks, self.module.imported) if varying is not None \
            and self.merge_outputs and not site.out_none else None
        if varying is None:
            mode = REPLICATED_OUT
        elif least and min(least) >= 1:
            mode = MERGED_OUT  # every device's result has a leading axis to merge into
        elif site.out_none:
            raise Blocker(OUTPUT_NOT_REPLICATED, varying,
                          f"{site.label} has out_axes=None but a result "
                          "is not provably the same on every device")
        elif not self.module.can_stack_results(site):
            raise Blocker(OUTPUT_NOT_REPLICATED, varying,
                          f"a result of `{site.name}` is per-device and its "
                          "function is shared with other code, so its results cannot be given "
                          "back with their device axis")
        else:
            mode = STACKED_OUT
        if self.modes.setdefault(site.key, mode) != mode:
            raise Blocker(OUTPUT_NOT_REPLICATED, call,
                          f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        if mode == STACKED_OUT or site.out_none:
            return SAME  # the original's layout: stacked per-device rows, or out_axes=None
        if mode == MERGED_OUT:
            return self._site_output(site, Kind("merged", least=min(least) + 1, placed=True))
        arrays = array_results(site, self.module.imported, self.module.functions)
        if arrays is not None:  # a tree shaped like a parameter: like that argument's stacks
            given = dict(zip(site.params, map(self.eval, call.args)))
            arrays = [shown if not isinstance(shown, str) else
                      given.get(shown, SAME).tag in ("repl", "merged")
                      and not given[shown].tree
                      for shown in arrays]
        shown = arrays is not None and all(arrays)
        return self._site_output(site, REPL if shown else Kind("repl", tree=True), arrays)

    def _argument_spec(self, argument, kind: Kind, axis, what: str) -> tuple[str, bool]:
        """(in_specs text, the same on every device) of one argument whose in_axes entry is
        `axis`: 0 / None, or a dict / tuple tree of them matched against the argument's
        fields (a dict or tuple literal of values of known layouts)."""
        if axis == 0 and _all_replicated(kind):  # a tuple / list of replicated stacks
            return "P()", True
        if isinstance(axis, (dict, tuple)):
            if isinstance(axis, dict):
                steps = [(f"[{key!r}]", key, sub) for key, sub in axis.items()]
            else:
                steps = [(f"[{i}]", i, sub) for i, sub in enumerate(axis)]
            fields = dict(kind.fields) if kind.tag == "fields" else None
            if fields is not None and sorted(fields) != sorted(step for step, _, _ in steps):
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{what}: its fields do not match the in_axes "
                              "tree")
            if fields is None and kind.tag == "fields":
                raise Blocker(PRODUCER_UNKNOWN, argument, f"{what}: not a tree the tool can match")
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
                raise Blocker(PRODUCER_UNKNOWN, argument, f"{what}: not a tree the tool can match")
            return self._argument_spec(argument, kind, axis, what)
        if axis is None:
            if kind.changed:
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{what} is not mapped (in_axes None) but "
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
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{what} is mapped on axis {axis}, which is "
                              "not provably the device count (the mesh's size)")
            return f"P({'None, ' * axis}{AXIS_PLACEHOLDER})", False
        why = self._unmergeable(argument)
        raise Blocker(PRODUCER_UNKNOWN, argument, f"{what} (`{ast.unparse(argument)}`): " + (
            why or "its producer is not recognised as a replicated value or a per-device batch"))

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
        if site.holder:
            return  # read where the class builds it (classes.py)
        for option, node in site.placement.items():
            direct = site.owner is not None or isinstance(node, ast.Call)
            want = "devices" if option == "devices" else "devcount"
            try:
                kind = self.eval(node) if direct else None
            except Blocker:
                kind = None
            if kind is None or kind.tag != want:
                what = "every device" if option == "devices" else "the device count"
                raise Blocker(OPTIONS, node, f"{site.label} has {option}="
                              f"`{ast.unparse(node)}`, not provably {what}: under the caller's "
                              "mesh over all devices it would run on different devices")

    def _result_tree(self, call: ast.Call, site: Site, replicated: set[str]) -> Kind:
        """`out_axes=(0, None, ...)`: per result, None needs a proven-replicated value (P(),
        unstacked as in the original); 0 is P() when proven (a replicated stack in the
        original) and otherwise keeps its device axis (expanded in the body, P(axis))."""
        tree = site.out_tree
        if isinstance(tree, int):  # one out_axes k >= 1: the result keeps pmap's layout
            if not self.module.can_stack_results(site):
                raise Blocker(OUTPUT_NOT_REPLICATED, site.node,
                              f"`{site.name}` has out_axes={tree} and its "
                              "function is shared with other code, so its results cannot be "
                              "given back with their device axis")
            mode = stacked_at(tree)
            if self.modes.setdefault(site.key, mode) != mode:
                raise Blocker(OUTPUT_NOT_REPLICATED, call,
                              f"{site.label} is called with different layouts")
            return SAME
        axes = dict(enumerate(tree)) if isinstance(tree, tuple) else tree
        try:
            varying = self.module.body_analysis(site).varying_results(replicated, list(axes))
        except NotProvable as error:
            raise Blocker(OUTPUT_NOT_REPLICATED, error.node,
                          f"{site.label}: {error.why}") from None
        modes, fields = [], []
        for position, axis in axes.items():
            node = varying[position]
            if axis not in (0, None):  # out_axes k >= 1: keeps pmap's layout, P(None, ..., axis)
                if not self.module.can_stack_results(site):
                    raise Blocker(OUTPUT_NOT_REPLICATED, site.node,
                                  f"result {position!r} of `{site.name}` has "
                                  f"out_axes {axis} and its function is shared with other code")
                modes.append(stacked_at(axis))
            elif node is None:
                modes.append(NONE_OUT if axis is None else REPLICATED_OUT)
            elif axis is None:
                raise Blocker(OUTPUT_NOT_REPLICATED, node,
                              f"result {position} of {site.label} has out_axes "
                              "None but is not provably the same on every device")
            elif not self.module.can_stack_results(site):
                raise Blocker(OUTPUT_NOT_REPLICATED, node,
                              f"result {position} of `{site.name}` is per-device "
                              "and its function is shared with other code, so it cannot be "
                              "given back with its device axis")
            else:
                modes.append(STACKED_OUT)
            fields.append((f"[{position!r}]", REPL if modes[-1] == REPLICATED_OUT else SAME))
        mode = tuple(modes)
        if self.modes.setdefault(site.key, mode) != mode:
            raise Blocker(OUTPUT_NOT_REPLICATED, call,
                          f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        if not any(kind.changed for _, kind in fields):
            return SAME
        return Kind("fields", fields=tuple(fields))

    def _scalars_call(self, call: ast.Call, site: Site, specs) -> Kind:
        """One number per device, into a body that only combines numbers elementwise (and
        with psum-like collectives): each device computes on its (1,) block what pmap
        computed on the number, and out_specs P(axis) gives back pmap's (n,) layout."""
        if any(s == "P()" for s in specs):
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} mixes per-device scalars with "
                          "replicated arguments")
        if self.specs.setdefault(site.key, specs) != specs:
            raise Blocker(PRODUCER_UNKNOWN, call, f"{site.label} is called with different layouts")
        if self.modes.setdefault(site.key, SCALARS_OUT) != SCALARS_OUT:
            raise Blocker(OUTPUT_NOT_REPLICATED, call,
                          f"{site.label} returns replicated results for some "
                          "calls and per-device results for others")
        for argument in call.args:
            if not self.eval(argument).scalars:
                raise Blocker(PRODUCER_UNKNOWN, argument,
                              f"{site.label} mixes per-device scalars with "
                              "other arguments")
        return SAME  # pmap's layout: one result per device along the leading axis

    def _site_output(self, site: Site, leaf: Kind, arrays: list[bool] | None = None) -> Kind:
        """A tuple literal returned by the body is a tuple of results: its elements can be
        unpacked or indexed one by one (`arrays`: which of them the body shows are arrays)."""
        body = site.body
        value = body.body if isinstance(body, ast.Lambda) else \
            next((s.value for s in body.body if isinstance(s, ast.Return)), None)
        if isinstance(value, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in value.elts):
            if arrays is not None and len(arrays) == len(value.elts):
                return Kind("fields", fields=tuple(
                    (f"[{i}]", REPL if shown else Kind("repl", tree=True))
                    for i, shown in enumerate(arrays)))
            return Kind("fields", fields=tuple((f"[{i}]", leaf) for i in range(len(value.elts))))
        return leaf


def _is_full_slice(node) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None \
        and node.step is None


def _is_generator(function: ast.FunctionDef) -> bool:
    """A `def` with a yield of its own (not one of a function or lambda nested in it)."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _shard_data(node: ast.Attribute) -> ast.AST | None:
    """x of `x.addressable_shards[k].data` (k a literal int), else None."""
    row = node.value
    if node.attr == "data" and isinstance(row, ast.Subscript) \
            and isinstance(row.value, ast.Attribute) and row.value.attr == "addressable_shards" \
            and isinstance(row.slice, ast.Constant) and type(row.slice.value) is int:
        return row.value.value
    return None


def _all_replicated(kind: Kind) -> bool:
    """A tuple or list of replicated stacks (`replicate((w, b))`, a step's tuple result)."""
    return kind.tag == "fields" and all(
        field.tag == "repl" and field.axis == 0 or _all_replicated(field) for _, field in kind.fields)
