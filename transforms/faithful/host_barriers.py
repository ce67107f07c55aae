"""Host barriers built from a pmapped psum -> `multihost_utils.sync_global_devices`.

pmap-era code synchronised hosts by psumming ones over every device and waiting for the result
(corpus_survey §2.7: kauldron's train loop, brax's `synchronize_hosts`):

    jax.pmap(lambda x: jax.lax.psum(x, "i"), "i")(jnp.ones(jax.local_device_count()))

JAX's migration guide sends such code to `sync_global_devices(name)`, which is what the barrier
means, works single- and multi-process, and needs no mesh. When the result is discarded (an
expression statement, possibly through `.block_until_ready()`), the statement is rewritten;
when the value is used (`assert x[0] == jax.device_count()`), the site is reported with the
replacement. Either way the pmap site gets its finding here, because the pmap rule never sees
a rewritten barrier.

Runs before PmapToShardMap. Line-preserving: a barrier written over several lines becomes a
call written over as many lines, so later rules report the input's line numbers.
"""

from __future__ import annotations

import libcst as cst

from transforms.codes import Code
from transforms.faithful.patched_pmap import SCRATCH_KEY as PATCH_KEY
from transforms.imports import add_import
from transforms.reading.snippets import source as _code
from transforms.reporting import ReportingTransformer

PMAP = "jax.pmap"
PSUM = {"jax.lax.psum"}
ONES = {"jax.numpy.ones", "numpy.ones"}
LOCAL_DEVICE_COUNT = {"jax.local_device_count"}
# Ways of waiting on the barrier's result without using its value.
WAIT_METHODS = {"block_until_ready"}
WAIT_FUNCTIONS = {"jax.block_until_ready", "jax.device_get"}
REPLACEMENT = "multihost_utils.sync_global_devices"
CLAIMED_KEY = "pmap_migrate.rewritten_barriers"  # the pmap calls PmapToShardMap must skip


class HostBarriers(ReportingTransformer):
    PREFILTER_WORDS = (rb"pmap",)  # only modules with pmap sites are reported

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rewrite: dict[cst.SimpleStatementLine, str] = {}  # statement -> barrier name

    # -- recognising the barrier ----------------------------------------------------------

    def _barrier_pmap(self, call: cst.CSTNode) -> cst.Call | None:
        """For `jax.pmap(<psum of its argument over its axis>, axis)(<ones(local_device_count)>)`,
        the inner `jax.pmap(...)` call."""
        if not isinstance(call, cst.Call) or len(call.args) != 1 or call.args[0].keyword:
            return None
        pmap = call.func
        if not isinstance(pmap, cst.Call) or PMAP not in self._qualified(pmap.func):
            return None
        positional = [a.value for a in pmap.args if not a.keyword and not a.star]
        keywords = {a.keyword.value: a.value for a in pmap.args if a.keyword}
        axis = positional[1] if len(positional) == 2 else keywords.get("axis_name")
        if not positional or axis is None or set(keywords) - {"axis_name"} or any(
            a.star for a in pmap.args
        ):
            return None
        if self._is_psum_of_argument(positional[0], call, axis) and self._is_ones_per_device(
            call.args[0].value, call
        ):
            return pmap
        return None

    def _is_psum_of_argument(self, fun: cst.BaseExpression, site: cst.CSTNode, axis) -> bool:
        """`lambda x: jax.lax.psum(x, axis)`, or the name of such a one-line def in the same
        block as the barrier (the def is left alone)."""
        if isinstance(fun, cst.Lambda):
            params, body = fun.params, fun.body
        elif isinstance(fun, cst.Name) and (found := self._local_def(fun.value, site)):
            params, statement = found.params, found.body.body[0]
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if not isinstance(small, cst.Return) or small.value is None:
                return False
            body = small.value
        else:
            return False
        if not _one_parameter(params):
            return False
        if not isinstance(body, cst.Call) or not self._qualified(body.func) & PSUM:
            return False
        args = [a for a in body.args if not a.keyword]
        keywords = {a.keyword.value: a.value for a in body.args if a.keyword}
        if len(args) == 1 and set(keywords) == {"axis_name"}:
            args.append(cst.Arg(keywords["axis_name"]))
        elif keywords or len(args) != 2:
            return False
        argument = params.params[0].name.value
        return (
            isinstance(args[0].value, cst.Name) and args[0].value.value == argument
            and _same(args[1].value, axis)
        )

    def _local_def(self, name: str, site: cst.CSTNode) -> cst.FunctionDef | None:
        """A one-statement def called `name` among the statements of the block holding `site`."""
        statement = self._enclosing_statement(site)
        block = self._parent(statement) if statement is not None else None
        for candidate in getattr(block, "body", ()):
            if (isinstance(candidate, cst.FunctionDef) and candidate.name.value == name
                    and not candidate.decorators and isinstance(candidate.body, cst.IndentedBlock)
                    and len(candidate.body.body) == 1):
                return candidate
        return None

    def _is_ones_per_device(self, value: cst.BaseExpression, site: cst.CSTNode) -> bool:
        """`jnp.ones(jax.local_device_count())` (the size also as a 1-list or 1-tuple), or a name
        assigned exactly that in an earlier statement of the same block."""
        if isinstance(value, cst.Name):
            value = self._assigned_before(value.value, site)
        if not isinstance(value, cst.Call) or not self._qualified(value.func) & ONES:
            return False
        if len(value.args) != 1 or value.args[0].keyword:
            return False
        size = value.args[0].value
        if isinstance(size, (cst.List, cst.Tuple)) and len(size.elements) == 1:
            size = size.elements[0].value
        return (
            isinstance(size, cst.Call) and not size.args
            and bool(self._qualified(size.func) & LOCAL_DEVICE_COUNT)
        )

    def _assigned_before(self, name: str, site: cst.CSTNode) -> cst.BaseExpression | None:
        statement = self._enclosing_statement(site)
        block = self._parent(statement) if statement is not None else None
        value = None
        for candidate in getattr(block, "body", ()):
            if candidate is statement:
                return value
            if isinstance(candidate, cst.SimpleStatementLine):
                for small in candidate.body:
                    if (isinstance(small, cst.Assign) and len(small.targets) == 1
                            and isinstance(small.targets[0].target, cst.Name)
                            and small.targets[0].target.value == name):
                        value = small.value
        return None

    def _enclosing_statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        while node is not None and not isinstance(node, cst.BaseStatement):
            node = self._parent(node)
        return node

    def _barrier_name(self, node: cst.CSTNode) -> str:
        """The dotted name of the enclosing defs and classes: the same on every host."""
        names = []
        node = self._parent(node)
        while node is not None:
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                names.append(node.name.value)
            node = self._parent(node)
        return ".".join(reversed(names)) or "module"

    # -- visits and rewrite ---------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.scratch.get(PATCH_KEY) is not None:
            return  # the module patches jax.pmap: its barriers stay pmaps too (PM211)
        pmap = self._barrier_pmap(node)
        if pmap is None:
            return
        name = self._barrier_name(node)
        replacement = f'`{REPLACEMENT}("{name}")` (from jax.experimental import multihost_utils)'
        statement = self._discarding_statement(node)
        if statement is None:
            self._report(pmap, Code.HOST_BARRIER_VALUE_USED,
                         "host barrier from a pmapped psum whose value is used: replace it "
                         f'with `{REPLACEMENT}("{name}")`, dropping the value\'s check')
            return
        if self._report(pmap, Code.HOST_BARRIER_REWRITTEN,
                        f"host barrier built from a pmapped psum -> "
                        f"{replacement}"):
            self._rewrite[statement] = name
            self.context.scratch.setdefault(CLAIMED_KEY, set()).add(pmap)

    def _discarding_statement(self, call: cst.Call) -> cst.SimpleStatementLine | None:
        """The statement line when the barrier's value is thrown away, else None."""
        node, parent = call, self._parent(call)
        if isinstance(parent, cst.Attribute) and parent.attr.value in WAIT_METHODS:
            outer = self._parent(parent)
            if isinstance(outer, cst.Call) and outer.func is parent and not outer.args:
                node, parent = outer, self._parent(outer)
        elif isinstance(parent, cst.Arg):
            outer = self._parent(parent)
            if (isinstance(outer, cst.Call) and len(outer.args) == 1
                    and self._qualified(outer.func) & WAIT_FUNCTIONS):
                node, parent = outer, self._parent(outer)
        if not isinstance(parent, cst.Expr) or parent.value is not node:
            return None
        line = self._parent(parent)
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            return line
        return None

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        name = self._rewrite.get(original_node)
        if name is None:
            return updated_node
        add_import(self.context, "jax.experimental", "multihost_utils")
        extra_lines = _code(original_node.body[0]).count("\n")
        call = cst.parse_expression(f'{REPLACEMENT}("{name}")')
        if extra_lines:
            call = _spread_over(call, extra_lines)
        return updated_node.with_changes(body=[cst.Expr(call)])


def _spread_over(call: cst.Call, extra_lines: int) -> cst.Call:
    """Write `call` over 1 + extra_lines lines, as high as the barrier it replaces, so the
    rules after this one keep reporting the input's line numbers."""
    indent = cst.SimpleWhitespace("    ")
    padding = []
    if extra_lines >= 3:
        note = cst.Comment("# pmap-migrate: was a host barrier built from a pmapped psum")
        padding = [cst.EmptyLine(indent=True, whitespace=indent, comment=note)]
        padding += [cst.EmptyLine(indent=False)] * (extra_lines - 3)
    arg = call.args[0]
    if extra_lines >= 2:  # the closing parenthesis on its own line
        arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True)))
    return call.with_changes(args=[arg], whitespace_before_args=cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), empty_lines=padding, indent=True, last_line=indent))


def _one_parameter(params: cst.Parameters) -> bool:
    return (
        len(params.params) == 1 and not params.posonly_params and not params.kwonly_params
        and not isinstance(params.star_arg, cst.Param) and params.star_kwarg is None
    )


def _same(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """The same axis name: equal strings (whatever the quotes) or the same code."""
    if isinstance(a, cst.SimpleString) and isinstance(b, cst.SimpleString):
        return a.evaluated_value == b.evaluated_value
    return " ".join(_code(a).split()) == " ".join(_code(b).split())


