"""Unreplicate idioms on pmap outputs: `x[0]`, `tree_map(lambda a: a[0], t)`, flax `unreplicate`.

Migrated pmap sites return arrays sharded over devices along the leading axis (as JAX's own pmap
does since 0.8). On those, `x[0]` compiles a cross-device gather with an all-reduce, ~50x
slower than legacy pmap's local read (research §5, R13). Where the row only goes to the host
(`float(x[0])`, `jax.device_get(tree_map(lambda a: a[0], out))`, ...) the read is rewritten to
`_first_replica(x)`, a module helper that returns the shard holding row 0 and otherwise is
exactly `x[0]`, so a wrong guess about `x` cannot change a value. Where the row stays a device
array (kept, fed to jitted code) it is left alone and its cost reported. flax's `unreplicate` is
reported everywhere.

Which names hold pmap outputs is decided in transforms/faithful/pmap_outputs.py.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.pmap_outputs import PmapOutputs
from transforms.faithful.pmap_sites import PMAP
from transforms.helpers.helper_templates import helper_text
from transforms.imports import RuleContext, add_import
from transforms.module_helpers import request_helper
from transforms.reading.snippets import one_line
from transforms.reading.snippets import parameters as _all_params
from transforms.reading.snippets import shorten as _shorten
from transforms.reporting import ReportingTransformer
from transforms.suppressions import Suppressions
from transforms.target import TargetJax

HELPER = "_first_replica"
HELPER_SOURCE = helper_text(HELPER)  # transforms/templates/first_replica.py

# Calls whose argument only goes to the host: qualified name -> which positional argument.
HOST_CALLS = {
    "builtins.float": "first",
    "builtins.int": "first",
    "builtins.print": "any",
    "numpy.asarray": "first",
    "numpy.array": "first",
    "jax.device_get": "first",
}
HOST_METHODS = {"item", "tolist"}  # `x[0].item()`
TREE_HOST_CALLS = {"jax.device_get", "numpy.asarray", "numpy.array"}  # take a whole pytree
TREE_MAPS = {"jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map"}
FLAX_UNREPLICATE = "flax.jax_utils.unreplicate"
STORE_CONTEXTS = (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del)  # `x[0] = ...`
COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)

COST = "a cross-device gather (~50x pmap's local read)"


class Unreplicate(PmapOutputs, ReportingTransformer):
    """Rewrite host-transfer reads of row 0 of pmap outputs; report the ones kept on device."""

    PREFILTER_WORDS = (rb"pmap", rb"unreplicate")

    def __init__(
        self, context: RuleContext, target: TargetJax, suppressions: Suppressions | None = None
    ):
        super().__init__(context, target, suppressions)

    # -- the idioms -------------------------------------------------------------------------------

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        """`x[0]` on a pmap output: rewritten when it goes straight to the host, else reported."""
        if not _is_row_zero(original_node) or not self._is_pmap_output(original_node.value):
            return updated_node
        if isinstance(self._parent(original_node), STORE_CONTEXTS):
            return updated_node
        code = _shorten(self._code(original_node))
        value = _shorten(self._code(original_node.value), 40)
        if not self._is_host_read(original_node):
            self._report(
                original_node, Code.UNREPLICATE_ON_DEVICE,
                f"`{code}` on pmap output `{value}` stays on device and compiles {COST}; kept",
            )
            return updated_node
        if not self._report(
            original_node, Code.UNREPLICATE_FOR_HOST,
            f"`{code}` goes to the host: `{self._helper_name(HELPER)}({value})` reads row 0's "
            "shard, no cross-device gather",
        ):
            return updated_node
        request_helper(self.context, HELPER, HELPER_SOURCE)
        return cst.Call(
            func=cst.Name(self._helper_name(HELPER)), args=[cst.Arg(updated_node.value)],
            lpar=updated_node.lpar, rpar=updated_node.rpar,
        )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self._is_tree_row_zero(original_node):
            return self._tree_form(original_node, updated_node)
        func = original_node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if name == "unreplicate" and FLAX_UNREPLICATE in self._qualified(func):
            return self._flax_unreplicate(original_node, updated_node)
        return updated_node

    def _tree_form(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """`tree_map(lambda a: a[0], out)` -> `tree_map(_first_replica, out)` for the host."""
        code = _shorten(self._code(original))
        if not self._is_tree_host_read(original):
            self._report(
                original, Code.UNREPLICATE_ON_DEVICE,
                f"`{code}` on a pmap output stays on device and compiles, per leaf, {COST}; kept",
            )
            return updated
        if not self._report(
            original, Code.UNREPLICATE_FOR_HOST,
            f"`{code}` goes to the host: `{self._helper_name(HELPER)}` reads the shard holding "
            "row 0 of each leaf "
            "instead of compiling a cross-device gather",
        ):
            return updated
        request_helper(self.context, HELPER, HELPER_SOURCE)
        first = updated.args[0].with_changes(value=cst.Name(self._helper_name(HELPER)))
        return updated.with_changes(args=[first, *updated.args[1:]])

    def _flax_unreplicate(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """Always reported; rewritten to `jax.tree_util.tree_map(_first_replica, out)` only
        for a known pmap output going to the host."""
        code = _shorten(self._code(original))
        tree = _only_positional(original)
        on_pmap_output = tree is not None and self._is_pmap_output(tree)
        if on_pmap_output and self._is_tree_host_read(original):
            if not self._report(
                original, Code.UNREPLICATE_FOR_HOST,
                f"`{code}` goes to the host: "
                f"`jax.tree_util.tree_map({self._helper_name(HELPER)}, ...)` reads the "
                "shard holding row 0 of each leaf instead of compiling a cross-device gather",
            ):
                return updated
            request_helper(self.context, HELPER, HELPER_SOURCE)
            add_import(self.context, "jax")
            helper_arg = cst.Arg(cst.Name(self._helper_name(HELPER)),
                                 comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return updated.with_changes(
                func=cst.parse_expression("jax.tree_util.tree_map"),
                args=[helper_arg, *updated.args],
            )
        where = "on this pmap output" if on_pmap_output else "on pmap outputs"
        self._report(
            original, Code.FLAX_UNREPLICATE,
            f"`{code}` is tree_map(lambda x: x[0], ...): {where} each leaf compiles {COST}; kept",
        )
        return updated

    # -- contexts ---------------------------------------------------------------------------------

    def _is_host_read(self, node: cst.CSTNode) -> bool:
        """`node` is directly the argument of a host-transfer call, or `node.item()`."""
        parent = self._parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = self._parent(parent)
            return (
                parent.attr.value in HOST_METHODS
                and isinstance(call, cst.Call)
                and call.func is parent
                and not call.args
            )
        call = self._call_of_arg(node)
        if call is None:
            return False
        for name in self._qualified(call.func) & HOST_CALLS.keys():
            if HOST_CALLS[name] == "any" or _positional(call)[0].value is node:
                return True
        return False

    def _is_tree_host_read(self, node: cst.Call) -> bool:
        call = self._call_of_arg(node)
        return (
            call is not None
            and _positional(call)[0].value is node
            and bool(self._qualified(call.func) & TREE_HOST_CALLS)
        )

    def _call_of_arg(self, node: cst.CSTNode) -> cst.Call | None:
        """The call `node` is a plain positional argument of, if any."""
        arg = self._parent(node)
        if not isinstance(arg, cst.Arg) or arg.keyword or arg.star:
            return None
        call = self._parent(arg)
        if isinstance(call, cst.Call) and any(a is arg for a in call.args):
            return call
        return None

    def _is_tree_row_zero(self, node: cst.Call) -> bool:
        """`tree_map(lambda a: a[0], out)` with `out` a pmap output."""
        if len(node.args) != 2 or len(_positional(node)) != 2:
            return False
        fn = node.args[0].value
        if not isinstance(fn, cst.Lambda) or not isinstance(fn.body, cst.Subscript):
            return False
        params = fn.params
        if len(_all_params(params)) != 1 or len(params.params) != 1 or params.params[0].default:
            return False
        body = fn.body
        return (
            _is_row_zero(body)
            and isinstance(body.value, cst.Name)
            and body.value.value == params.params[0].name.value
            and bool(self._qualified(node.func) & TREE_MAPS)
            and self._is_pmap_output(node.args[1].value)
        )

    def _code(self, node: cst.CSTNode) -> str:
        return one_line(node)


# -- syntax only -------------------------------------------------------------------------------


def _is_row_zero(node: cst.Subscript) -> bool:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return False
    index = node.slice[0].slice
    return index.star is None and isinstance(index.value, cst.Integer) and index.value.value == "0"


def _positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if not a.keyword and not a.star]


def _only_positional(call: cst.Call) -> cst.BaseExpression | None:
    args = _positional(call)
    return args[0].value if len(args) == 1 and len(call.args) == 1 else None


__all__ = ["FLAX_UNREPLICATE", "HELPER", "PMAP", "Unreplicate"]
