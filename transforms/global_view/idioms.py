"""The pmap-era idioms a caller of global sites uses around them: producers of stacks and
batches (replicate, stack, broadcast_to, reshapes, device_put_sharded, shard). The consumers
of outputs (x[0], unreplicate, tree_map(lambda a: a[0], ...), host reductions) are
consumers.py."""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import PRODUCER_UNKNOWN
from transforms.global_view.sites import Blocker
from transforms.global_view.values import (
    ARRAY_OF_ROWS,
    AXIS_PLACEHOLDER,
    CONSTANT_FILLS,
    REPL,
    REPLICATE,
    RNG_DRAWS,
    ROWS,
    SAME,
    SHARD,
    SHARD_PRNG_KEY,
    TREE_MAP,
    Kind,
    describe,
    is_minus_one,
    operand_text,
    placed,
    replicated_operand,
    tuple_text,
)


# numpy / jax.numpy functions that always return a new array, whatever their arguments.
_ALLOCATING = frozenset({"zeros", "ones", "full", "empty", "arange", "linspace", "eye",
                         "identity", "zeros_like", "ones_like", "full_like", "empty_like"})


_RESHAPE_FUNCTIONS = frozenset({"numpy.reshape", "jax.numpy.reshape"})


class IdiomsMixin:
    """`CallerAnalysis`'s producers (dataflow.py holds the state they read)."""

    def producer(self, call: ast.Call, name: str) -> Kind | None:
        if name in REPLICATE and call.args and not any(k.arg == "devices" for k in call.keywords):
            if name == "jax.device_put_replicated" and (
                    len(call.args) != 2 or self.eval(call.args[1]).tag != "devices"):
                raise Blocker(PRODUCER_UNKNOWN, call,
                              "device_put_replicated onto a device list that is "
                              "not all local devices")
            self._need_same(call.args[0])
            self._edit(call, self._replicated(self.render(call.args[0]), call.args[0]))
            return _replicated_tree(call.args[0])
        value = replicated_operand(call, name, self._is_devcount, self._rank_of)
        if value is not None:
            self._need_same(value)
            self._edit(call, self._unstacked(call, name, value))
            return REPL
        function, binding = self.lambda_of(call.args[0]) if len(call.args) == 2 else (None, None)
        if name in TREE_MAP and function is not None:
            tree = call.args[1]
            body = function.body
            params = [a.arg for a in function.args.args]
            if isinstance(body, ast.Call) and len(params) == 1:
                operand = replicated_operand(body, self.qualified(body.func), self._is_devcount,
                                             lambda node: None)
                if isinstance(operand, ast.Name) and operand.id == params[0]:
                    self._need_same(tree)
                    self._edit(call, self._unstacked(body, self.qualified(body.func), tree,
                                                     tree=True))
                    if binding is not None:
                        self.cut_statement(binding)  # the lambda, now read nowhere
                    return _replicated_tree(tree)
        if name in TREE_MAP and len(call.args) == 2 and not call.keywords:
            sharded = self._sharded_leaves(call.args[0], call.args[1])
            if sharded is not None:
                return sharded
            leaves = self._module_function_on_leaves(call)
            if leaves is not None:
                return leaves
        if name in CONSTANT_FILLS and call.args and not any(k.arg == "shape" for k in call.keywords):
            shape = call.args[0]
            rest = None
            if self._is_devcount(shape):
                rest = []
            elif isinstance(shape, (ast.Tuple, ast.List)) and shape.elts \
                    and self._is_devcount(shape.elts[0]) \
                    and not any(isinstance(e, ast.Starred) for e in shape.elts):
                rest = shape.elts[1:]
            if rest is not None:
                for argument in [*rest, *call.args[1:], *(k.value for k in call.keywords)]:
                    self._need_same(argument)
                self._edit(shape, tuple_text([self.render(e) for e in rest]))
                text = self.render(call)
                if name.startswith("jax.numpy.") and not text.startswith(
                        f"{self.module.jax}.device_put("):  # on the mesh: _unstacked says why
                    self._edit(call, placed(self.module.jax, text, "P()"))
                return REPL
        if name in SHARD and len(call.args) == 1 and not call.keywords:
            self._need_same(call.args[0])
            self._edit(call, self.placed_batch(self.render(call.args[0])))
            # shard: a reshape to (n, -1, ...)
            return Kind("merged", least=2, placed=self.batches_placed)
        reshaped = self._reshape_to_devices(call, name)
        if reshaped is not None:
            array, dims, tuple_form = reshaped
            for operand in (array, *dims[1:]):  # `*x.shape[1:]` of a batch would change too
                self._need_same(operand)
            count, first, rest = dims[0], dims[1], dims[2:]
            if is_minus_one(first):
                merged = ["-1", *(self.render(a) for a in rest)]
            elif _is_one(first):
                merged = [self.render(count), *(self.render(a) for a in rest)]
            else:
                merged = [f"{self.render(count)} * {operand_text(self.render(first))}",
                          *(self.render(a) for a in rest)]
            flat = self._flat_count(array)
            if not rest and flat is not None and (is_minus_one(first) or (
                    ast.dump(flat[0]) == ast.dump(count) and (
                        ast.dump(flat[1]) == ast.dump(first) if flat[1] is not None
                        else _is_one(first)))):
                self._edit(call, self.render(array))  # already the merged 1-D batch
            else:
                shape = ", ".join(merged)
                if tuple_form:
                    shape = f"({shape}{',' if len(merged) == 1 else ''})"
                self._edit(call, f"{self.render(call.func)}({self.render(array)}, {shape})"
                           if name in _RESHAPE_FUNCTIONS
                           else f"{operand_text(self.render(array))}.reshape({shape})")
            return Kind("merged", rank=len(dims))
        shape = call.args[0] if len(call.args) == 1 and not call.keywords else None
        if isinstance(call.func, ast.Attribute) and call.func.attr == "reshape" \
                and shape is not None and self.eval(shape).leads:
            # `x.reshape(tuple(batch_dims) + (FEATURES,))`, batch_dims led by the device count:
            # pmap's layout, kept as it is (the shape is not written where it could be merged)
            self._need_same(call.func.value)
            return ROWS
        if isinstance(call.func, ast.Attribute) and call.func.attr == "reshape" \
                and isinstance(shape, ast.BinOp) and isinstance(shape.op, ast.Add) \
                and isinstance(shape.left, ast.Tuple) and len(shape.left.elts) == 2 \
                and self._is_devcount(shape.left.elts[0]):
            # flax's shard: x.reshape((n, -1) + x.shape[1:]), the rows of each device
            self._need_same(call.func.value)
            self._need_same(shape.right)
            count, rows = shape.left.elts
            merged = "-1" if is_minus_one(rows) else \
                f"{self.render(count)} * {operand_text(self.render(rows))}"
            self._edit(shape.left, f"({merged},)")
            return Kind("merged", least=2)
        if isinstance(call.func, ast.Attribute) and call.func.attr in RNG_DRAWS:
            size = next((k.value for k in call.keywords if k.arg == "size"), None)
            if isinstance(size, ast.Tuple) and len(size.elts) >= 2 and self._is_devcount(size.elts[0]):
                self._same(call.func.value)
                for argument in call.args:
                    self._need_same(argument)
                rows = operand_text(self.render(size.elts[1]))
                merged = [f"{self.render(size.elts[0])} * {rows}",
                          *(self.render(e) for e in size.elts[2:])]
                text = ", ".join(merged) + ("," if len(merged) == 1 else "")
                self._edit(size, f"({text})")
                return Kind("merged", rank=len(size.elts))
        if name in ("numpy.arange", "jax.numpy.arange") and self._counts_devices(call.args) \
                and all(k.arg == "dtype" for k in call.keywords):
            for keyword in call.keywords:
                self._need_same(keyword.value)
            return Kind("same", rank=1, scalars=True, rows=True)
        if name in ("jax.random.split", "jax.random.key_split") and len(call.args) == 2 \
                and not call.keywords and self._is_devcount(call.args[1]) or (
                    name in ("jax.random.split", "jax.random.key_split") and len(call.args) == 1
                    and [k.arg for k in call.keywords] == ["num"]
                    and self._is_devcount(call.keywords[0].value)) or (
                    name == SHARD_PRNG_KEY and len(call.args) == 1 and not call.keywords):
            self._need_same(call.args[0])
            return ROWS  # one key per device: no batch axis to merge into, kept stacked
        if name == "jax.device_put_sharded" and len(call.args) == 2:
            return self._device_put_sharded(call)
        return None

    def _sharded_leaves(self, function, tree) -> Kind | None:
        """flax's shard written out: `tree_map(lambda x: x.reshape((n, -1) + x.shape[1:]), xs)`
        or the same with a def nested in this function (`_prepare(x)`, whose body may first
        convert `x = x._numpy()`), read by nothing else. Each leaf is a per-device batch, and
        the reshape inside is merged as it would be at top level."""
        leaf = self._leaf_function(function)
        if leaf is None:
            return None
        param, statements, value = leaf
        if not (isinstance(value, ast.Call) and (
                isinstance(value.func, ast.Attribute) and value.func.attr == "reshape"
                or self.qualified(value.func) in _RESHAPE_FUNCTIONS)) \
                or self.eval(tree).changed:  # a consumer's tree_map (consumers.py)
            return None
        saved = dict(self.kinds)
        self.kinds[param] = SAME  # one leaf of `tree`, a plain array
        try:
            for statement in statements:
                self._need_same(statement.value)
            kind = self.eval(value)
        finally:
            self.kinds = saved
        if kind.tag != "merged":
            if kind.changed:
                raise Blocker(PRODUCER_UNKNOWN, value, "a tree_map whose function gives "
                              "per-device values other than a batch reshaped to the device count")
            return None
        return kind

    def _module_function_on_leaves(self, call: ast.Call) -> Kind | None:
        """`tree_map(f, tree)` of a module function `f` that makes per-device values
        (big_vision's `shard_and_put`) over a plain tree: `f` followed as a helper given one
        leaf, as `map(f, xs)` follows it given one element; each leaf becomes what it
        returns, and so the tree (a batch of batches is one batch). None where `f` is no
        such function, or makes nothing per-device."""
        function, tree = call.args
        if not (isinstance(function, ast.Name) and function.id in self.module.functions
                and function.id not in self.sites and self._produces(function.id)) \
                or self.eval(tree).changed:
            return None
        kind = self._helper_call(call, self.module.functions[function.id], [SAME])
        if kind.tag in ("merged", "repl"):
            return kind
        if kind.changed:
            raise Blocker(PRODUCER_UNKNOWN, call, f"`{function.id}` gives each leaf "
                          f"{describe(kind)}, which a tree of them does not keep")
        return None

    def _leaf_function(self, function) -> tuple[str, list, ast.AST] | None:
        """(parameter, statements before the return, returned value) of a one-parameter
        lambda, or of a function this one names once (`shard_leaf = lambda x: ...`, or a def
        nested here whose body is `param = ...` assignments, after a docstring, and one
        return): a function written once and used once is the same as one written in place."""
        if isinstance(function, ast.Lambda):
            arguments, statements, value = function.args, [], function.body
        else:
            named = self.named_function(function)
            if named is None:
                return None
            _, arguments, statements, value = named
        if len(arguments.args) != 1 or arguments.vararg or arguments.kwarg \
                or arguments.kwonlyargs or arguments.posonlyargs or arguments.defaults:
            return None
        param = arguments.args[0].arg
        if not all(isinstance(s, ast.Assign) and len(s.targets) == 1
                   and isinstance(s.targets[0], ast.Name) and s.targets[0].id == param
                   for s in statements):
            return None
        return param, statements, value

    def _reshape_to_devices(self, call: ast.Call, name: str):
        """(array, dims, dims written as one tuple) of a reshape whose leading dimension is
        the device count and that gives each device at least one axis: `x.reshape(n, a, ...)`,
        `x.reshape((n, a, ...))` or `jnp.reshape(x, (n, a, ...))`; None for any other call."""
        if call.keywords:
            return None
        if name in _RESHAPE_FUNCTIONS:
            if len(call.args) != 2:
                return None
            array, shape = call.args[0], [call.args[1]]
        elif isinstance(call.func, ast.Attribute) and call.func.attr == "reshape":
            array, shape = call.func.value, call.args
        else:
            return None
        tuple_form = len(shape) == 1 and isinstance(shape[0], ast.Tuple)
        dims = shape[0].elts if tuple_form else shape
        if len(dims) < 2 or any(isinstance(d, ast.Starred) for d in dims[:2]) \
                or not self._is_devcount(dims[0]):  # `*x.shape[1:]` may follow them
            return None
        return array, dims, tuple_form

    def _counts_devices(self, arguments) -> bool:
        """`arange(n)`, or `arange(k, n + k)` with the same pure k: n numbers, n the device
        count."""
        if len(arguments) == 1:
            return self._is_devcount(arguments[0])
        if len(arguments) != 2 or not isinstance(arguments[1], ast.BinOp) \
                or not isinstance(arguments[1].op, ast.Add):
            return False
        start, stop = arguments
        for count, offset in ((stop.left, stop.right), (stop.right, stop.left)):
            if self._is_devcount(count) and isinstance(offset, (ast.Constant, ast.Name)) \
                    and ast.dump(offset) == ast.dump(start):
                return True
        return False

    def _flat_count(self, node) -> tuple | None:
        """(a, b) of `np.arange(a * b, ...)` or `np.linspace(start, stop, a * b, ...)`: a 1-D
        array of a * b elements, which `.reshape(a, b)` splits and the merge joins again
        ((count, None) for another count; None if `node` is not such a 1-D array)."""
        if not isinstance(node, ast.Call):
            return None
        name = self.qualified(node.func)
        count = None
        if name in ("numpy.arange", "jax.numpy.arange") and len(node.args) == 1 \
                and all(k.arg == "dtype" for k in node.keywords):
            count = node.args[0]
        elif name in ("numpy.linspace", "jax.numpy.linspace") and len(node.args) == 3 \
                and all(k.arg == "dtype" for k in node.keywords):
            count = node.args[2]
        if isinstance(count, ast.BinOp) and isinstance(count.op, ast.Mult):
            return count.left, count.right
        return None if count is None else (count, None)

    def _device_put_sharded(self, call: ast.Call) -> Kind:
        pieces, devices = call.args
        if self.eval(devices).tag != "devices":
            raise Blocker(PRODUCER_UNKNOWN, call,
                          "device_put_sharded onto a device list that is not "
                          "all local devices")
        if isinstance(pieces, ast.Call) and isinstance(pieces.func, ast.Name) \
                and pieces.func.id == "list" and "list" not in self.module.table.bound_otherwise \
                and len(pieces.args) == 1 and not pieces.keywords:
            # `list(x)` of an array is its rows along the leading axis, as
            # `[x[i] for i in range(n)]`: of a per-device batch, the batch itself, merged.
            kind = self.eval(pieces.args[0])
            if kind.tag != "merged":
                raise Blocker(PRODUCER_UNKNOWN, pieces.args[0],
                              f"`{ast.unparse(pieces)}`: `{ast.unparse(pieces.args[0])}` is "
                              "not a per-device batch the tool can merge")
            self._edit(call, self.placed_batch(self.render(pieces.args[0])))
            return dataclasses.replace(kind, placed=self.batches_placed)
        if not (isinstance(pieces, ast.ListComp) and len(pieces.generators) == 1):
            raise Blocker(PRODUCER_UNKNOWN, pieces, "device_put_sharded of something other than "
                          "`[... x[i] ... for i in range(n)]` or `list(x)`")
        generator = pieces.generators[0]
        iterated = generator.iter
        if not (isinstance(generator.target, ast.Name) and not generator.ifs
                and isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name)
                and iterated.func.id == "range" and "range" not in self.module.table.bound_otherwise
                and len(iterated.args) == 1 and self._is_devcount(iterated.args[0])):
            raise Blocker(PRODUCER_UNKNOWN, pieces, "device_put_sharded of a list not built over "
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
                raise Blocker(PRODUCER_UNKNOWN, node, f"`{index}` used other than as `x[{index}]`")
        saved = dict(self.kinds)
        try:
            substitutes = {}
            for node in rows.values():
                kind = self.eval(node.value)
                if kind.tag != "merged":
                    raise Blocker(PRODUCER_UNKNOWN, node,
                                  f"`{ast.unparse(node)}`: `{node.value.id}` is "
                                  "not a per-device batch the tool can merge")
                substitutes[id(node)] = kind
            self._rows = substitutes
            kind = self.eval(pieces.elt)
        finally:
            self._rows = {}
            self.kinds = saved
        if kind.tag != "merged":
            raise Blocker(PRODUCER_UNKNOWN, pieces.elt,
                          "the device_put_sharded pieces are not rows of "
                          "a batch the tool can merge")
        self._edit(call, self.placed_batch(self.render(pieces.elt)))
        return dataclasses.replace(kind, placed=self.batches_placed)

    _rows: dict = {}

    def _replicated(self, text: str, value: ast.AST, tree: bool = True) -> str:
        """A replicated placement (`device_put_replicated`, flax `replicate`): `P()`, of a
        copy when a step of the module donates and `value` may be the user's own array (the
        original's replicas were copies, so donating them never deleted it). The copy is
        spelled out: `device_put(x, P(), may_alias=False)` of an array on one device (a
        module constant, a value made before the mesh) reuses its buffer there on jax 0.10.2,
        and the donating step then deleted `x`. `tree`: `value` may be a pytree (else one
        array, copied with `jnp.copy` itself)."""
        jax = self.module.jax
        if self.module.donating and not self._made_here(value):
            text = f"{jax}.tree.map({self.module.numpy}.copy, {text})" if tree \
                else f"{self.module.numpy}.copy({text})"
        return placed(jax, text, "P()")

    def _made_here(self, value: ast.AST) -> bool:
        """`value` is made by the expression itself, so nothing else holds it: a literal, a
        numpy or jax.numpy allocation (`jnp.zeros(3)`, `np.ones((3,), np.float32)`), a numpy
        or jax.numpy call on constants only (`jnp.float32(0.5)`), or a dict / list / tuple
        of those. A name, an attribute or another function's result may be a value
        that is read again (a module constant, a parameter, a cached tree)."""
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, (ast.Tuple, ast.List)):
            return all(self._made_here(e) for e in value.elts)
        if isinstance(value, ast.Dict):
            return None not in value.keys and all(self._made_here(v) for v in value.values)
        if isinstance(value, ast.BinOp):  # `jnp.eye(4) * 0.5`: arithmetic makes a new array
            return self._made_here(value.left) and self._made_here(value.right)
        if isinstance(value, ast.UnaryOp):
            return self._made_here(value.operand)
        if isinstance(value, ast.Call):
            name = self.qualified(value.func)
            if not name.startswith(("numpy.", "jax.numpy.")):
                return False
            if name.rsplit(".", 1)[-1] in _ALLOCATING:
                return True
            # `jnp.float32(2.0)`: a scalar of constants (of an array it may be that array).
            return all(self._made_here(a) for a in value.args) and not value.keywords
        return False

    def _unstacked(self, stack: ast.Call, name: str, value: ast.AST, tree: bool = False) -> str:
        """The one value a stack (`jnp.stack([x] * n)`, `np.broadcast_to(x, ...)`) repeats.
        With a donating step it must not be the user's `x` itself: the original stacked a new
        array, so donation never deleted `x`. A numpy stack stays a host array; a jax.numpy
        one becomes a replicated placement (fresh where a step donates). Placed, it is laid
        out as the steps' replicated results are, so a step fed first this value and then its
        own result compiles once (a one-device `x` and a replicated result are two input
        layouts to jax.jit)."""
        text = self.render(value)
        if not self.module.donating and name.startswith("numpy.") and name in ARRAY_OF_ROWS:
            numpy = ast.unparse(stack.func.value) if isinstance(stack.func, ast.Attribute) else None
            if numpy is not None:  # an array, as the original's rows were, not the list item
                return f"{self.module.jax}.tree.map({numpy}.asarray, {text})" if tree \
                    else f"{numpy}.asarray({text})"
        if not self.module.donating:
            return text if name.startswith("numpy.") else placed(self.module.jax, text, "P()")
        if name.startswith("numpy."):
            numpy = ast.unparse(stack.func.value) if isinstance(stack.func, ast.Attribute) else None
            already = isinstance(value, ast.Call) and self.qualified(value.func) in (
                "numpy.asarray", "numpy.array")
            if already or numpy is None:
                return text
            return f"{self.module.jax}.tree.map({numpy}.asarray, {text})" if tree \
                else f"{numpy}.asarray({text})"
        return self._replicated(text, value, tree)

    def placed_batch(self, text: str) -> str:
        """A merged batch placed where the original placed its rows (`shard`,
        `device_put_sharded`); multi-process callers leave it host-local (see
        global_view/multiprocess.py)."""
        return placed(self.module.jax, text, f"P({AXIS_PLACEHOLDER})")

    def _placed_once(self, call: ast.Call, kind: Kind) -> Kind:
        """`jnp.asarray(batch)` of a merged host batch: placed with its sharding where it is
        made, not left on one device for jit to split again at every step that reads it
        (pmap split its stacked batch at every call too; placed once, that cost is gone)."""
        self._edit(call, self.placed_batch(self.render(call)))
        return dataclasses.replace(kind, placed=True)


def _replicated_tree(tree) -> Kind:
    """The stacks of a tree literal's elements: a tuple or list literal stays one, so that
    `params[0]` is its first element, not device 0's row."""
    if isinstance(tree, (ast.Tuple, ast.List)) and tree.elts and not any(
            isinstance(e, ast.Starred) for e in tree.elts):
        return Kind("fields", fields=tuple((f"[{i}]", _replicated_tree(e))
                                           for i, e in enumerate(tree.elts)))
    return REPL


def _is_one(node) -> bool:
    """The literal int 1 (a `(n, 1)` shape's second dimension)."""
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 1
