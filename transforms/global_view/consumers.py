"""The pmap-era consumers of a global site's outputs in its caller: row 0 (`x[0]`,
unreplicate, tree_map(lambda a: a[0], ...)), host reductions and conversions, tree_map of a
lambda over a leaf. A mixin of `CallerAnalysis` (dataflow.py holds the state it reads); the
producers of stacks and batches are idioms.py."""

from __future__ import annotations

import ast
import dataclasses

from transforms.codes.global_view import CONSUMER_UNKNOWN
from transforms.global_view.sites import Blocker
from transforms.global_view.values import (
    AS_ARRAY,
    DEVICE_ARRAYS,
    IDENTITIES,
    CONSTANT_FILLS,
    GET_METRICS,
    REDUCTIONS,
    SAME,
    ROWS,
    SAME_ON_EQUAL_ROWS,
    SHAPED_LIKE,
    STACK,
    TO_SCALAR,
    TREE_MAP,
    UNREPLICATE,
    WHOLE_REDUCTION_FUNCTIONS,
    WHOLE_REDUCTIONS,
    Kind,
    describe,
    is_row_zero_lambda,
    list_of,
)


class ConsumersMixin:
    """`CallerAnalysis`'s consumers of per-device values."""

    def _whole_reduction(self, call: ast.Call, name: str) -> Kind | None:
        """`x.mean()`, `jnp.max(x)` or `tree_map(jnp.mean, metrics)` over every element: the
        same number whatever the layout, when the elements are the same. A merged batch holds
        the stacked batch's elements in another shape (any such reduction); a replicated
        stack holds one row n times, which the global value is once (mean, max, min, all,
        any; not sum or prod, n times larger). A float mean may differ in its last bit, as
        any reordered reduction does."""
        func = call.func
        if call.keywords:
            return None
        if isinstance(func, ast.Attribute) and func.attr in WHOLE_REDUCTIONS and not call.args \
                and not self._instance_attribute(func):
            operand, reduction = func.value, func.attr
        elif name in TREE_MAP and len(call.args) == 2:
            reduction = WHOLE_REDUCTION_FUNCTIONS.get(self.qualified(call.args[0]))
            operand = call.args[1]
        elif name in WHOLE_REDUCTION_FUNCTIONS and len(call.args) == 1:
            operand, reduction = call.args[0], WHOLE_REDUCTION_FUNCTIONS[name]
        else:
            return None
        if reduction is None:
            return None
        kind = self.eval(operand)  # haiku's logging: `np.mean(v).item()` of a pmean'd scalar
        # A method is an array's (no tuple or dict has `.mean()`); numpy's function would make
        # one array of a tuple of stacks, and tree_map reduces each leaf.
        per_leaf = name in TREE_MAP or isinstance(func, ast.Attribute)
        if kind.tag == "merged" and (per_leaf or not kind.tree):
            return SAME
        if kind.tag == "repl" and kind.axis == 0 and (per_leaf or not kind.tree) \
                and reduction in SAME_ON_EQUAL_ROWS:
            return SAME
        return None

    def _consumer(self, call: ast.Call, name: str) -> Kind | None:
        func = call.func
        unreplicated = name in UNREPLICATE or (
            isinstance(func, ast.Name) and func.id in self.module.unreplicate_helpers)
        if unreplicated and len(call.args) == 1 and not call.keywords:
            return self._row_zero(call, call.args[0])
        function, binding = self.lambda_of(call.args[0]) if name in TREE_MAP \
            and len(call.args) == 2 and not call.keywords else (None, None)
        if function is not None and is_row_zero_lambda(function):
            kind = self._row_zero(call, call.args[1])
            if binding is not None:
                self.cut_statement(binding)  # the lambda, now read nowhere
            return kind
        if name == GET_METRICS and len(call.args) == 1 and not call.keywords:
            return self._metrics_stacked(call)
        if function is not None:
            per_leaf = self._tree_map_lambda(function, call.args[1])
            if per_leaf is not None:
                return per_leaf
        if name in TREE_MAP and len(call.args) == 2 and not call.keywords \
                and self.qualified(call.args[0]) in AS_ARRAY - {"jax.device_get"}:
            kind = self.eval(call.args[1])  # `tree_map(np.asarray, stacks)`: each leaf as is
            if kind.tag in ("repl", "merged") or kind.tag == "same" and kind.rows:
                return kind
        if name in CONSTANT_FILLS and call.args and isinstance(call.args[0], ast.Tuple) \
                and not call.args[0].elts:
            for argument in [*call.args[1:], *(k.value for k in call.keywords)]:
                self._need_same(argument)
            return Kind("same", rank=0)
        if name in SHAPED_LIKE and len(call.args) == 1 and all(
                k.arg == "dtype" for k in call.keywords):
            kind = self.eval(call.args[0])  # filled rows of the same shapes: the same layout
            for argument in call.keywords:
                self._need_same(argument.value)
            if kind.tag in ("repl", "merged"):
                return kind
            return None
        if name in IDENTITIES and len(call.args) == 1 and not call.keywords:
            return self.eval(call.args[0])
        reduced = self._whole_reduction(call, name)
        if reduced is not None:
            return reduced
        if name in AS_ARRAY and call.args:
            kind = self.eval(call.args[0])
            for argument in [*call.args[1:], *(k.value for k in call.keywords)]:
                self._need_same(argument)
            if name == "jax.device_get":
                return kind  # keeps the tree: a list stays a list
            if kind.tag == "fields" and all(step.startswith("[") and step[1:-1].isdigit()
                                            for step, _ in kind.fields):
                elements = {field for _, field in kind.fields}  # np.asarray((a, b)) stacks them
                kind = Kind("list", element=elements.pop()) if len(elements) == 1 else None
                if kind is None:
                    raise Blocker(CONSUMER_UNKNOWN, call,
                                  "an array of per-device values of mixed layout")
            if kind.tag == "list":
                element = kind.element
                if element.tag not in ("repl", "merged"):
                    raise Blocker(CONSUMER_UNKNOWN, call,
                                  "an array of per-device values of mixed layout")
                return dataclasses.replace(element, axis=element.axis + 1,
                                           rank=None if element.rank is None else element.rank + 1)
            if name in DEVICE_ARRAYS and kind.tag == "merged" and kind.axis == 0 \
                    and not kind.placed and self.batches_placed:
                return self._placed_once(call, kind)
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
                if func.attr in ("ravel", "flatten") and receiver.tag == "merged" \
                        and not call.args and not call.keywords:
                    # The device axis is merged into the axis after it, so the row-major
                    # order of the elements, and the flat array, are the original's.
                    return Kind("same", rank=1)
                if func.attr in ("sum", "mean", "max", "min") and receiver.tag == "merged" \
                        and len(call.args) == 1 and not call.keywords:
                    return self._trailing_reduction(call, receiver, call.args[0])
        if name in ("numpy.where", "jax.numpy.where") and len(call.args) == 3 \
                and not call.keywords:
            return self._elementwise(call, call.args)
        if name in REDUCTIONS and len(call.args) == 1:
            kind = self.eval(call.args[0])
            if kind.tag == "merged":
                axis = next((k.value for k in call.keywords if k.arg == "axis"), None)
                if len(call.keywords) != 1:
                    raise Blocker(CONSUMER_UNKNOWN, call,
                                  "a reduction over the batch or device axis of "
                                  "a per-device batch")
                return self._trailing_reduction(call, kind, axis)
        return None

    def _metrics_stacked(self, call: ast.Call) -> Kind | None:
        """flax's `common_utils.get_metrics(metrics)` of a list of a step's replicated metrics:
        it read device 0's copy of each and stacked them on the host. The migrated metrics are
        that copy, so the call is `common_utils.stack_forest(jax.device_get(metrics))`. A list
        kept in pmap's layout is read as before."""
        kind = self.eval(call.args[0])
        if not kind.changed:
            return SAME
        if kind.tag != "list" or kind.element is None or kind.element.tag != "repl" \
                or kind.element.axis != 0 or not isinstance(call.func, ast.Attribute):
            return None  # the generic call refuses it, naming what it holds
        module = self.render(call.func.value)
        self._edit(call, f"{module}.stack_forest({self.module.jax}.device_get("
                         f"{self.render(call.args[0])}))")
        return SAME

    def _trailing_reduction(self, call: ast.Call, kind: Kind, axis) -> Kind:
        """A reduction of a per-device batch over a trailing axis (`axis=-k`, k at most its
        rank - 2): merged batch in, merged batch out, row for row."""
        if (kind.rank is not None and isinstance(axis, ast.UnaryOp)
                and isinstance(axis.op, ast.USub) and isinstance(axis.operand, ast.Constant)
                and type(axis.operand.value) is int
                and 1 <= axis.operand.value <= kind.rank - 2 and kind.rank - 1 >= 2):
            return Kind("merged", rank=kind.rank - 1)
        raise Blocker(CONSUMER_UNKNOWN, call, "a reduction over the batch or device axis of a "
                      "per-device batch")

    def _tree_map_lambda(self, function: ast.Lambda, tree) -> Kind | None:
        """`tree_map(lambda x: ..., stacks)`: the lambda sees one leaf, an array of the tree's
        layout, and is followed as code on that leaf (its `x[0]` is row 0, its edits kept);
        the result is a tree of what it gives back."""
        arguments = function.args
        if len(arguments.args) != 1 or arguments.defaults or arguments.vararg or arguments.kwarg \
                or arguments.kwonlyargs or arguments.posonlyargs:
            return None
        kind = self.eval(tree)
        if kind.tag == "same" and kind.rows:
            return self._tree_map_rows(function)
        if kind.tag not in ("repl", "merged"):
            return None
        saved = dict(self.kinds)
        try:
            self.kinds[arguments.args[0].arg] = dataclasses.replace(kind, tree=False)  # a leaf
            leaf = self.eval(function.body)
        finally:
            self.kinds = saved
        if leaf.tag not in ("same", "repl", "merged"):
            raise Blocker(CONSUMER_UNKNOWN, function, f"a tree_map whose function gives back "
                          f"{describe(leaf)}")
        return SAME if leaf.tag == "same" else leaf

    def _tree_map_rows(self, function: ast.Lambda) -> Kind | None:
        """`tree_map(lambda x: x * 0.5 + 1.0, stacked)` of a tree in pmap's stacked layout: the
        lambda is read with its leaf in that layout (leading axis the device count, rank
        unknown); where what it gives back keeps that axis (numpy's rules, stacked_rows.py),
        so does every leaf of the result. None where it may not, or the lambda is not read."""
        saved, edits = dict(self.kinds), dict(self.edits)
        try:
            self.kinds[function.args.args[0].arg] = ROWS
            leaf = self.eval(function.body)
        except Blocker:
            self.edits = edits
            return None
        finally:
            self.kinds = saved
        if self.edits != edits:
            self.edits = edits
            return None
        return ROWS if leaf.rows and not leaf.changed else None

    def _row_zero(self, call: ast.Call, operand) -> Kind:
        kind = self.eval(operand)
        if kind.tag == "same":
            # A value the migration leaves as it is (pmap's stacked layout kept, or a plain
            # value on some paths and such a stack on others): its row 0 is the original's.
            return SAME
        if not _replicated_on_axis_0(kind):
            raise Blocker(CONSUMER_UNKNOWN, call, f"row 0 of {describe(kind)}: only a replicated "
                          "output's row 0 becomes direct use")
        self._edit(call, self.render(operand))
        return SAME


def _replicated_on_axis_0(kind: Kind) -> bool:
    """A replicated stack, or a tuple / dict literal or a list of them
    (`unreplicate((state, ema))`, `tree_map(lambda x: x[0], metrics_of_each_step)`): row 0
    of each is the value itself."""
    if kind.tag == "fields":
        return bool(kind.fields) and all(_replicated_on_axis_0(k) for _, k in kind.fields)
    if kind.tag == "list":
        return kind.element is not None and _replicated_on_axis_0(kind.element)
    return kind.tag == "repl" and kind.axis == 0


