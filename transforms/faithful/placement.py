"""Data placement for pmap-era code: the removed `device_put_replicated` / `device_put_sharded`
and flax's wrappers of them, plus the host batch reshape that feeds a pmapped function.

`jax.device_put_replicated` and `jax.device_put_sharded` (removed in JAX 0.10) become calls of
module-level helpers with the same signature (transforms/helpers/placement_helpers.py), so every
reference, called or not, is renamed (to `_device_put_sharded_2`, ... where the module has a
`_device_put_sharded` of its own: transforms/module_helpers.py). flax's `jax_utils.replicate(tree, devices=None)` is
`device_put_replicated(tree, devices or jax.local_devices())` and is rewritten to that. The
rest is reported: flax's `prefetch_to_device` (calls device_put_sharded inside flax),
`common_utils.shard` and the `(jax.local_device_count(), -1, ...)` reshape (still valid).
Names are matched by qualified name, never by text.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from transforms.codes import Code
from transforms.faithful.multiprocess import SCRATCH_KEY as MULTIPROCESS_EVIDENCE
from transforms.helpers.placement_helpers import REPLICATED, SHARDED, SOURCES
from transforms.imports import add_import, remove_import
from transforms.module_helpers import request_helper
from transforms.reading.snippets import shorten as _shorten
from transforms.reporting import ReportingTransformer

# Removed JAX functions -> (code, helper with the same signature).
RENAMED = {
    "jax.device_put_replicated": (Code.DEVICE_PUT_REPLICATED_MIGRATED, REPLICATED),
    "jax.device_put_sharded": (Code.DEVICE_PUT_SHARDED_MIGRATED, SHARDED),
}
FLAX_REPLICATE = "flax.jax_utils.replicate"
# Reported, not rewritten: qualified name -> (code, message).
REPORTED = {
    "flax.jax_utils.prefetch_to_device": (
        Code.FLAX_PREFETCH_TO_DEVICE,
        "flax.jax_utils.prefetch_to_device calls jax.device_put_sharded (removed in JAX 0.10) "
        "in flax releases before 0.12.7: use flax >= 0.12.7, whose prefetch_to_device splits "
        "each leaf's leading axis over the devices with a NamedSharding, or put each batch "
        "yourself with jax.device_put(x, NamedSharding(Mesh(np.array(devices), ('batch',)), "
        "PartitionSpec('batch'))) per leaf",
    ),
    "flax.training.common_utils.shard": (
        Code.FLAX_SHARD,
        "flax common_utils.shard reshapes on the host to (jax.local_device_count(), -1, ...): "
        "still valid; the migrated function reads its mesh size from that leading axis",
    ),
}
DEVICE_COUNTS = {"jax.local_device_count", "jax.device_count"}
PMAP = "jax.pmap"
RESHAPE_FUNCTIONS = {"numpy.reshape", "jax.numpy.reshape"}
# Names whose `from ... import` becomes unused once its uses are rewritten.
FROM_IMPORTS = {("jax", "device_put_replicated"), ("jax", "device_put_sharded"),
                ("flax.jax_utils", "replicate")}


class DataPlacement(ReportingTransformer):
    PREFILTER_WORDS = (
        rb"device_put_replicated", rb"device_put_sharded", rb"jax_utils", rb"common_utils",
        rb"device_count\(",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._count_names: dict[str, str] = {}  # variable -> device-count function it holds
        self._reshapes: list[tuple[cst.Call, str, str]] = []  # (site, count function, text)
        self._from_imports: dict[tuple[str, str], set[str | None]] = {}  # -> their asnames
        self._feeds_pmap = False  # the module refers to jax.pmap
        self._rewrote = False

    # -- module ---------------------------------------------------------------------------

    def visit_Module(self, node: cst.Module) -> None:
        """Top-level `n = jax.local_device_count()`, read by functions above it too (one pass
        over the body, no search)."""
        for statement in node.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign):
                        self.visit_Assign(small)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        # The reshape matters as the input of a pmap: said once, where pmap is migrated.
        for call, count, text in self._reshapes if self._feeds_pmap else ():
            # MultiProcess (first in RULES) found the module's multi-process calls up front.
            multi_host = MULTIPROCESS_EVIDENCE in self.context.scratch
            if count == "jax.device_count" and multi_host:
                self._report(call, Code.GLOBAL_DEVICE_COUNT_RESHAPE,
                             f"`{text}` uses jax.device_count() in a module that "
                             "uses jax.process_count/process_index: on several hosts that is the "
                             "global count, but each host feeds only its local devices; use "
                             "jax.local_device_count()")
            else:
                self._report(call, Code.DEVICE_BATCH_RESHAPE,
                             f"`{text}`: a leading axis of {count}() is what pmap and "
                             "its migration expect")
        if self._rewrote:
            for (module, name), asnames in self._from_imports.items():
                for asname in asnames:
                    remove_import(self.context, module, name, asname)
        return updated_node

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return False
        module = cst.Module([]).code_for_node(node.module)
        for alias in node.names:
            name = cst.Module([]).code_for_node(alias.name)
            if (module, name) in FROM_IMPORTS:
                asname = alias.asname.name.value if alias.asname else None
                self._from_imports.setdefault((module, name), set()).add(asname)
        return False

    # -- references ------------------------------------------------------------------------

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if not self._qualified(original_node):
            return updated_node  # refers to nothing: what _reference would return
        parent = self._parent(original_node)
        if isinstance(parent, cst.Attribute) and parent.attr is original_node:
            return updated_node
        return self._reference(original_node, updated_node)

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        return self._reference(original_node, updated_node)

    def _reference(self, original, updated) -> cst.BaseExpression:
        names = self._qualified(original)
        if PMAP in names:
            self._feeds_pmap = True
        if not names & (RENAMED.keys() | REPORTED.keys() | {FLAX_REPLICATE}):
            return updated
        if isinstance(self._parent(original), (cst.ImportAlias, cst.AsName)):
            return updated
        for name in names & REPORTED.keys():
            self._report(original, *REPORTED[name])
        if FLAX_REPLICATE in names and not self._is_called(original):
            self._report(original, Code.PLACEMENT_NOT_MIGRATED,
                         "flax.jax_utils.replicate used as a value: its "
                         "calls cannot be seen; not migrated (call it directly, or use "
                         "_device_put_replicated(tree, devices or jax.local_devices()))")
        for name in names & RENAMED.keys():
            code, helper = RENAMED[name]
            if self._is_target(original):
                self._report(original, Code.PLACEMENT_NOT_MIGRATED,
                             f"`{name}` is assigned or deleted here; not migrated")
            elif self._report(original, code, f"{name} -> {self._helper_name(helper)} (module "
                              "helper, same signature and placement)"):
                return self._use_helper(helper, updated)
        return updated

    def _is_called(self, node: cst.CSTNode) -> bool:
        parent = self._parent(node)
        return isinstance(parent, cst.Call) and parent.func is node

    def _is_target(self, node: cst.CSTNode) -> bool:
        parent = self._parent(node)
        if isinstance(parent, (cst.AssignTarget, cst.Del)):
            return True
        return isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is node

    def _use_helper(self, helper: str, node: cst.BaseExpression) -> cst.Name:
        request_helper(self.context, helper, SOURCES[helper])
        self._rewrote = True
        return cst.Name(self._helper_name(helper), lpar=node.lpar, rpar=node.rpar)

    # -- calls -----------------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> None:
        count = self._device_count(node.value)
        for target in node.targets:
            if isinstance(target.target, cst.Name) and count:
                self._count_names[target.target.value] = count

    def visit_Call(self, node: cst.Call) -> None:
        leading = self._reshape_leading_dim(node)
        count = self._device_count(leading) if leading is not None else None
        if count:
            self._reshapes.append((node, count, _shorten(cst.Module([]).code_for_node(node))))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if FLAX_REPLICATE not in self._qualified(original_node.func):
            return updated_node
        arguments = _replicate_arguments(updated_node.args)
        if arguments is None:
            self._report(original_node, Code.PLACEMENT_NOT_MIGRATED,
                         "flax.jax_utils.replicate called with "
                         "arguments other than (tree, devices=None); not migrated")
            return updated_node
        replicated = self._helper_name(REPLICATED)
        if not self._report(original_node, Code.FLAX_REPLICATE_MIGRATED,
                            "flax.jax_utils.replicate(tree, devices) -> "
                            f"{replicated}(tree, devices or jax.local_devices())"):
            return updated_node
        tree, devices = arguments
        add_import(self.context, "jax")
        args = [_positional(tree, tree.value), _positional(devices, _or_local(devices))]
        return updated_node.with_changes(
            func=self._use_helper(REPLICATED, updated_node.func),
            args=_keep_layout(args, updated_node),
        )

    def _device_count(self, expr: cst.BaseExpression) -> str | None:
        """The device-count function `expr` calls or a variable holds, if any."""
        if isinstance(expr, cst.Call):
            return next(iter(self._qualified(expr.func) & DEVICE_COUNTS), None)
        if isinstance(expr, cst.Name):
            return self._count_names.get(expr.value)
        return None

    def _reshape_leading_dim(self, call: cst.Call) -> cst.BaseExpression | None:
        """The first dimension of a batch reshape `(first, -1, ...)`: `x.reshape(n, -1, ...)`,
        `x.reshape((n, -1) + x.shape[1:])`, `np.reshape(x, (n, -1, ...))`."""
        func = call.func
        args = [a for a in call.args if not a.star]
        if self._qualified(func) & RESHAPE_FUNCTIONS:
            shape = [a.value for a in args if a.keyword and a.keyword.value in ("newshape", "shape")]
            shape = shape or [a.value for a in args[1:2] if not a.keyword]
            dims = _literal_dims(shape[0]) if shape else []
        elif isinstance(func, cst.Attribute) and func.attr.value == "reshape":
            positional = [a.value for a in args if not a.keyword]
            dims = positional if len(positional) > 1 else _literal_dims(*positional[:1])
        else:
            return None
        return dims[0] if len(dims) > 1 and _is_minus_one(dims[1]) else None


# Expressions that `x or y` does not need to parenthesise.
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.List, cst.Tuple, cst.Dict)


def _literal_dims(shape: cst.BaseExpression | None = None) -> list[cst.BaseExpression]:
    """The leading dimensions a shape literal spells out: `(n, -1)`, `(n, -1) + x.shape[1:]`."""
    if isinstance(shape, cst.BinaryOperation) and isinstance(shape.operator, cst.Add):
        shape = shape.left
    if not isinstance(shape, cst.Tuple):
        return []
    dims = []
    for element in shape.elements:
        if isinstance(element, cst.StarredElement):
            break
        dims.append(element.value)
    return dims


def _is_minus_one(expr: cst.BaseExpression) -> bool:
    return (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and isinstance(expr.expression, cst.Integer) and expr.expression.value == "1")


def _replicate_arguments(args: Sequence[cst.Arg]) -> tuple[cst.Arg, cst.Arg | None] | None:
    """The (tree, devices) arguments of a `replicate(tree, devices=None)` call, or None if
    the call passes anything else."""
    if any(a.star for a in args):
        return None
    names = ("tree", "devices")
    positional = [a for a in args if not a.keyword]
    keywords = {a.keyword.value: a for a in args if a.keyword}
    if len(positional) > 2 or set(keywords) - set(names[len(positional):]):
        return None
    bound = dict(zip(names, positional)) | keywords
    if "tree" not in bound:
        return None
    return bound["tree"], bound.get("devices")


def _or_local(devices: cst.Arg | None) -> cst.BaseExpression:
    """flax's `devices or jax.local_devices()` for the devices argument."""
    local = cst.parse_expression("jax.local_devices()")
    if devices is None or isinstance(devices.value, cst.Name) and devices.value.value == "None":
        return local
    value = devices.value
    if not isinstance(value, _ATOMS) and not value.lpar:  # its own parentheses keep comments
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BooleanOperation(left=value, operator=cst.Or(), right=local)


def _positional(arg: cst.Arg | None, value: cst.BaseExpression) -> cst.Arg:
    """`value` as a positional argument, keeping `arg`'s comma and comments if there was one."""
    if arg is None:
        return cst.Arg(value)
    return arg.with_changes(value=value, keyword=None, equal=cst.MaybeSentinel.DEFAULT)


def _keep_layout(args: list[cst.Arg], call: cst.Call) -> list[cst.Arg]:
    """The call's commas, line breaks and comments stay at the same argument positions; a
    devices argument added after a multi-line `replicate(\n tree,  # note\n)` gets its own
    line."""
    commas = [a.comma for a in call.args]
    if len(commas) == 2:
        return [a.with_changes(comma=c) for a, c in zip(args, commas)]
    last = commas[0]
    if isinstance(last, cst.Comma) and isinstance(last.whitespace_after, cst.ParenthesizedWhitespace):
        ws = last.whitespace_after
        head = call.whitespace_before_args
        indent = head.last_line if isinstance(head, cst.ParenthesizedWhitespace) else ws.last_line
        return [args[0].with_changes(comma=last.with_changes(
                    whitespace_after=ws.with_changes(last_line=indent))),
                args[1].with_changes(comma=last.with_changes(
                    whitespace_after=cst.ParenthesizedWhitespace(indent=ws.indent,
                                                                 last_line=ws.last_line)))]
    return [args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT), args[1]]


