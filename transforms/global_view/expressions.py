"""Expressions in a caller of global sites: what kind of value each one is (`eval`), calls
of helpers, subscripts, arithmetic, containers. The calls of the sites themselves are
site_calls.py."""

from __future__ import annotations

import ast

from transforms.codes.global_view import CALLERS_UNSEEN, CONSUMER_UNKNOWN
from transforms.global_view.sites import PMAP, Blocker, dotted
from transforms.global_view.values import (
    DEVICE_COUNT,
    DEVICES,
    REPLICATE,
    ROWS,
    SAME,
    SHARD,
    Kind,
    describe,
    least_rank,
    list_of,
    with_origin,
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
        if self.qualified(producer.func) in ("jax.random.split", "jax.random.key_split"):
            return (f"per-device RNG keys (`{text}`, line {producer.lineno}): a key per device "
                    "has no batch axis to merge the device axis into")
        if self.qualified(producer.func) in ("numpy.arange", "jax.numpy.arange"):
            return (f"per-device scalars (`{text}`, line {producer.lineno}): one number per "
                    "device has no batch axis to merge the device axis into")
        return (f"`{text}` (line {producer.lineno}) is built from the device count, but not by "
                "a producer the tool recognises as a per-device batch (a reshape to "
                "(n, -1, ...), shard, device_put_sharded, a random draw of size (n, ...))")

    def qualified(self, func) -> str:
        return dotted(func, self.module.imported)

    def _call(self, call: ast.Call) -> Kind:
        func = call.func
        held = self._instance_call(call)
        if held is not None:
            return held
        name = self.qualified(func)
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) \
                and func.func.id in self.sites and self.sites[func.func.id].factory:
            for argument in [*func.args, *(k.value for k in func.keywords)]:
                kind = self.eval(argument.value if isinstance(argument, ast.Starred) else argument)
                if kind.changed:
                    raise Blocker(CONSUMER_UNKNOWN, argument,
                                  f"{describe(kind)} passed to the pmap "
                                  f"factory `{func.func.id}`")
            return self.site_call(call, self.sites[func.func.id])
        if isinstance(func, ast.Name) and func.id in self.sites:
            if self.sites[func.id].factory:
                raise Blocker(CALLERS_UNSEEN, call,
                              f"the pmap factory `{func.id}` called other than "
                              f"as `{func.id}(...)(...)`")
            return self.site_call(call, self.sites[func.id])
        if id(func) in self.inline:
            return self.site_call(call, self.inline[id(func)])
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
        if (name in ("builtins.list", "builtins.tuple") or (
                isinstance(func, ast.Name) and func.id in ("list", "tuple")
                and func.id not in self.module.table.bound_otherwise)) \
                and len(call.args) == 1 and not call.keywords \
                and self.eval(call.args[0]).tag == "devices":
            return Kind("devices")  # `list(jax.devices())`: the same devices, in their order
        produced = self.producer(call, name)
        if produced is not None:
            self.produced[id(call)] = name
            if id(call) in self.keep_stacked and produced.changed:
                # pmap's stacked layout, kept: no edit, the device count as leading axis
                span = self.module.span(call)
                for key in [k for k in self.edits if span[0] <= k[0] and k[1] <= span[1]]:
                    del self.edits[key]
                return ROWS
            # Only replicated stacks may go back to pmap's layout (a batch's shards would not
            # match what the migrated consumers read).
            return with_origin(produced, frozenset({id(call)})) if produced.tag in (
                "repl", "fields") and "merged" not in repr(produced) else produced
        consumed = self._consumer(call, name)
        if consumed is not None:
            return consumed
        if isinstance(func, ast.Name) and func.id in self.module.functions and (any(
                self.eval(a).tag not in ("same",) for a in call.args
                if not isinstance(a, ast.Starred)) or self._produces(func.id)):
            return self._helper_call(call, self.module.functions[func.id])
        # A generic call: nothing per-device may reach it.
        if isinstance(func, ast.Attribute):
            self.eval(func)
        elif not isinstance(func, ast.Name):
            self._same(func)
        rows = False
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            kind = self.eval(argument.value if isinstance(argument, ast.Starred) else argument)
            if kind.changed:
                raise Blocker(CONSUMER_UNKNOWN, argument, f"{describe(kind)} passed to "
                              f"`{ast.unparse(func)}`, which the global style does not follow")
            rows = rows or kind.rows
        # A pmap kept with its calling contract maps every argument on axis 0: given stacked
        # rows, its results have the device count as leading axis too.
        return ROWS if rows and self._contract_pmap(func) else SAME

    def _contract_pmap(self, func) -> bool:
        """`func` is a pmap left to pmap's contract with in_axes and out_axes 0: a blocked site
        called by name, or `jax.pmap(f)` / `jax.pmap(f, axis_name)` called on the spot."""
        if isinstance(func, ast.Name):
            site = next((s for s in self.module.sites.values() if s.name == func.id
                         and not s.holder and not s.inline), None) if func.id not in self.sites \
                else None
            return site is not None and site.out_tree is None and not site.out_none \
                and all(axis == 0 for axis in site.in_axes) and not site.static
        return isinstance(func, ast.Call) and self.qualified(func.func) == PMAP \
            and len(func.args) <= 2 and all(k.arg == "axis_name" for k in func.keywords)

    def _helper_call(self, call: ast.Call, helper: ast.FunctionDef) -> Kind:
        """A module function given the device count or stacks (`x, y = make_data(n)`): it is
        followed with those parameter kinds, and its own edits join this function's, when
        nothing else in the module calls it."""
        name = helper.name
        arguments = helper.args
        if (self.module.loads.get(name, 0) != self._calls_here(name) or call.keywords
                or self.depth >= 2
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
        calls = self.helper_parameters.setdefault(name, {})
        calls[id(call)] = parameters  # a loop's later pass replaces its own call's kinds
        if any(other != parameters for other in calls.values()):
            raise Blocker(CONSUMER_UNKNOWN, call, f"`{name}` is called with values of different "
                          "layouts, and one rewritten helper cannot serve them all")
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

    def _calls_here(self, name: str) -> int:
        """How many times this function calls `name` (by name): a helper it follows must have
        no other use in the module, since the helper is rewritten for this function."""
        return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
                   for n in ast.walk(self.function))

    def _produces(self, name: str) -> bool:
        """A module function that builds per-device values itself (a program's own
        `replicate(tree)` over device_put_replicated, a `shard(x)` reshaping to the device
        count): followed like a helper given the device count."""
        nodes = list(ast.walk(self.module.functions[name]))
        return any(isinstance(n, ast.Call) and self.qualified(n.func) in _PRODUCING
                   for n in nodes) and not any(
            isinstance(n, (ast.Name, ast.Attribute)) and self.qualified(n) == PMAP for n in nodes)

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
            if kind.rows and isinstance(index, ast.Constant) and isinstance(index.value, str):
                return ROWS  # a leaf of a dict of stacked rows (a string key is no device row)
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
            for kind, other in ((left, node.right), (right, node.left)):  # stacked rows, a number
                if kind.rows and isinstance(other, ast.Constant) and type(other.value) in (int, float):
                    return ROWS
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
                # A number with a batch or a replicated stack: row by row, the same operation.
                if (kind.tag == "merged" or kind.tag == "repl" and kind.axis == 0
                        and not kind.tree) and isinstance(other, ast.Constant) \
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


# What a module function calls when it builds per-device values of its own.
_PRODUCING = DEVICE_COUNT | DEVICES | REPLICATE | SHARD | {"jax.device_put_sharded"}
