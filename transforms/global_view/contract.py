"""The floor of the global style: a pmap whose callers or mapped function the analysis cannot
follow keeps pmap's calling contract, written as `jax.jit` over shard_map.

Every argument keeps its leading device axis (in_specs `P(axis)`, or `P()` where in_axes is
None), the mesh is the first n devices with n the mapped arguments' leading axis at the call
(as pmap sizes it; jit traces once per n), the mapped function sees one device's row and its
results get the device axis back (out_axes 0) or come back unstacked (out_axes None). The
callers are not touched, so this holds for callers in other modules, values of unknown layout,
bound methods, factories and pmaps passed around. What this needs is in `contract_options`:
pmap's options must be literals it can express; anything else stays faithful, with the
reason on the site's fallback finding.

The module gets `_pmap_mesh` and `_per_device_shard_map` once (contract_text.py), about 40
lines, instead of the faithful helper with pmap's argument checks and legacy messages. pmap's
`devices=` is kept: the mesh is those devices, in their order.

In a multi-process module (jax.distributed) pmap took each process's host-local rows, ran over
every process's devices and gave each process its rows back. There `jax.jit` becomes
`_across_processes` (contract_text.py): with several processes it makes the host-local
arguments one global array over a mesh of every process's devices grouped by process (as pmap
orders them), calls the jitted program and gives back the process's own rows; with one
process, or under another trace, it is the jitted function itself; `.lower(...).compile()`
takes and returns host-local rows too.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import itertools

from transforms.codes.findings import Finding
from transforms.codes.global_view import FALLBACKS
from transforms.global_view.contract_text import ACROSS_PROCESSES, ADAPTER
from transforms.global_view.site_findings import contract_findings
from transforms.global_view.sites import JIT, PARTIAL, PMAP, dotted
from transforms.global_view.step_text import LINE_LIMIT, shifted
from transforms.global_view.values import DEFAULT_AXIS, quoted, tuple_text
from transforms.reading.pmap_options import (
    NOT_LITERAL,
    AxesDict,
    literal_argnums,
    problems,
    read_axes,
)

_OPTIONS = {"axis_name", "in_axes", "out_axes", "static_broadcasted_argnums", "donate_argnums",
            "devices"}


class NotExpressible(Exception):
    """pmap options the contract form cannot write: the site stays faithful."""


class _Containment:
    """Whether some span of a list holds a given span (a <= start and end <= b): the spans
    sorted by start, with the furthest end reached so far, so each question is a bisection."""

    def __init__(self, spans: list[tuple[int, int]]):
        ordered = sorted(spans)
        self.starts = [a for a, _ in ordered]
        self.reach = list(itertools.accumulate((b for _, b in ordered), max))

    def __call__(self, span: tuple[int, int]) -> bool:
        k = bisect.bisect_right(self.starts, span[0]) - 1
        return k >= 0 and self.reach[k] >= span[1]


@dataclasses.dataclass
class ContractSite:
    node: ast.AST  # the `jax.pmap(f, ...)` call, or the decorator expression
    decorator: bool
    axis: str  # source text of the axis name
    in_specs: str
    out_specs: str
    static: str | None  # source text of static_broadcasted_argnums
    donate: str | None  # source text of donate_argnums
    function: ast.AST | None = None  # the mapped function expression of a call
    devices: str | None = None  # `tuple(...)` of the source text of devices=
    function_indent: int = 0  # the indentation of the line the mapped function starts on


def contract_options(node: ast.AST, imported: dict[str, str], source_of) -> ContractSite:
    """The contract form of a `jax.pmap(f, ...)` call, a bare `@jax.pmap` or a
    `@functools.partial(jax.pmap, ...)` decorator (`decorator` is then True); raises
    NotExpressible naming the option it cannot write."""
    if not isinstance(node, ast.Call):  # bare @jax.pmap
        axis = quoted(DEFAULT_AXIS)
        return ContractSite(node, True, axis, f"P({axis})", f"P({axis})", None, None)
    name = dotted(node.func, imported)
    decorator = name == PARTIAL
    arguments = node.args[1:]
    if name == PMAP and not node.args:
        raise NotExpressible("the mapped function is not given positionally")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise NotExpressible("pmap options passed with * or **")
    if len(arguments) > 1:
        raise NotExpressible("pmap options given positionally beyond axis_name")
    keywords = {k.arg: k.value for k in node.keywords}
    unknown = sorted(set(keywords) - _OPTIONS)
    if unknown:
        raise NotExpressible(f"pmap option {', '.join(unknown)} picks devices the "
                             "convention cannot")
    axis_node = arguments[0] if arguments else keywords.get("axis_name")
    axis = source_of(axis_node) if axis_node is not None and not (
        isinstance(axis_node, ast.Constant) and axis_node.value is None) else quoted(DEFAULT_AXIS)
    static = _int_tuple(keywords.get("static_broadcasted_argnums"), "static_broadcasted_argnums")
    in_axes = _axes(keywords.get("in_axes", ast.Constant(0)), "in_axes")
    if isinstance(in_axes, tuple):
        in_axes = tuple(a for i, a in enumerate(in_axes) if i not in (static or ()))
        in_specs = tuple_text([f"P({axis})" if a == 0 else "P()" for a in in_axes])
    else:
        in_specs = f"P({axis})" if in_axes == 0 else "P()"
    out_axes = _axes(keywords.get("out_axes", ast.Constant(0)), "out_axes")
    if isinstance(out_axes, tuple):
        raise NotExpressible("out_axes is a tuple (the contract form writes one out_axes, 0 or None)")
    out_specs = f"P({axis})" if out_axes == 0 else "P()"
    if in_axes is None or (isinstance(in_axes, tuple) and all(a is None for a in in_axes)):
        raise NotExpressible("in_axes maps no argument (pmap sizes its mesh from one)")
    donate = keywords.get("donate_argnums")
    devices = keywords.get("devices")
    if isinstance(devices, ast.Constant) and devices.value is None:
        devices = None
    return ContractSite(node, decorator, axis, in_specs, out_specs,
                        tuple_text([str(i) for i in static]) if static else None,
                        source_of(donate) if donate is not None else None,
                        None if decorator else node.args[0],
                        f"tuple({source_of(devices)})" if devices is not None else None)


def _int_tuple(node, what: str) -> tuple[int, ...] | None:
    if node is None:
        return None
    value = literal_argnums(node)
    if value is None:
        raise NotExpressible(f"{what} is not a literal int or tuple of ints")
    return value


def _axes(node, what: str):
    """0, None, or a tuple of them; anything else is not expressible here."""
    value = read_axes(node, what)
    if isinstance(value, list) and what == "in_axes":
        raise NotExpressible("in_axes is a list, on which pmap raises (it needs a tuple)")
    if any(p.code == NOT_LITERAL for p in problems(value)) or _non_literal_key(value):
        raise NotExpressible(f"{what} is not a literal")
    if value is None or value == 0:
        return value
    if isinstance(value, (tuple, list)) and value and all(v is None or v == 0 for v in value):
        return tuple(value)
    raise NotExpressible(f"{what} {ast.unparse(node)} (the contract form maps axis 0 or nothing)")


def _non_literal_key(value) -> bool:
    if isinstance(value, AxesDict):
        return any(key is not None and not key.literal or _non_literal_key(child)
                   for key, child in value.items)
    return isinstance(value, (tuple, list)) and any(_non_literal_key(v) for v in value)


def contract_text(site: ContractSite, jit: str, partial: str, source_of, indent: str,
                  column: int, adapter_name: str = ADAPTER) -> str:
    """The text that replaces the site's node, which starts at `column` of a line indented
    by `indent`; wrapped as a formatter would, to LINE_LIMIT. `jit`: `jax.jit`, or
    `_across_processes` in a multi-process module, or None for the adapter alone (the user's
    own jit already wraps the site). `adapter_name`: `_per_device_shard_map`'s name here."""
    options = [f"in_specs={site.in_specs}", f"out_specs={site.out_specs}"]
    if site.static:
        options.append(f"static_argnums={site.static}")
    if site.devices:
        options.append(f"devices={site.devices}")
    jit_options = [f"static_argnums={site.static}"] if site.static else []
    if site.donate:
        jit_options.append(f"donate_argnums={site.donate}")
    if site.decorator and jit is None:
        return _wrapped(partial, [adapter_name, f"axis_name={site.axis}", *options], indent,
                        column)
    if site.decorator:
        jit = _wrapped(partial, [jit, *jit_options], indent, column) if jit_options else jit
        adapter = _wrapped(partial, [adapter_name, f"axis_name={site.axis}", *options], indent,
                           len(indent) + 1)
        return f"{jit}\n{indent}@{adapter}"
    function = source_of(site.function)
    if "\n" in function:  # on a line of its own, as deep as the adapter's other arguments
        depth = len(indent) + (4 if jit is None else 8)
        function = shifted(function, depth - site.function_indent)
    inner = [function, site.axis, *options]
    if jit is None:
        return _wrapped(adapter_name, inner, indent, column)
    one_line = (f"{jit}({adapter_name}({', '.join(inner)})"
                f"{''.join(', ' + o for o in jit_options)})")
    if column + len(one_line) <= LINE_LIMIT and "\n" not in one_line:
        return one_line
    pad = indent + "    "
    adapter = _wrapped(adapter_name, inner, pad, len(pad))
    if not jit_options:  # one argument: no trailing comma, as black writes it
        return f"{jit}(\n{pad}{adapter}\n{indent})"
    return f"{jit}(\n" + "".join(f"{pad}{a},\n" for a in [adapter, *jit_options]) + \
        f"{indent})"


def _wrapped(head: str, arguments: list[str], indent: str, column: int) -> str:
    """`head(arguments)` on one line, or its arguments on one line of their own, or one per
    line, whichever fits."""
    joined = ", ".join(arguments)
    if column + len(head) + len(joined) + 2 <= LINE_LIMIT and "\n" not in joined:
        return f"{head}({joined})"
    pad = indent + "    "
    if len(pad) + len(joined) <= LINE_LIMIT and "\n" not in joined:
        return f"{head}(\n{pad}{joined}\n{indent})"
    return f"{head}(\n" + "".join(f"{pad}{a},\n" for a in arguments) + f"{indent})"


def pmap_nodes(tree: ast.Module, imported: dict[str, str]) -> list[tuple[ast.AST, ast.AST | None]]:
    """(node, mapped function) of every pmap the contract form may take: `jax.pmap(f, ...)`
    calls (f: the expression) and pmap decorators, bare or `functools.partial(jax.pmap, ...)`
    (f: the def). A pmap used any other way (passed, stored as `jax.pmap`) is not one."""
    found = []
    decorators = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                if dotted(decorator, imported) == PMAP or (
                        call is not None and dotted(call.func, imported) == PARTIAL
                        and call.args and dotted(call.args[0], imported) == PMAP):
                    found.append((decorator, node))
                    decorators.add(id(decorator))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in decorators \
                and dotted(node.func, imported) == PMAP and node.args:
            found.append((node, node.args[0]))
    return found


def nested(found, tree: ast.Module) -> set[int]:
    """ids of the pmap nodes that are part of a nested pmap (a pmap inside the function
    another pmap maps, or mapping a function that holds one): pmap of pmap stays faithful."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    inside = {}
    for node, function in found:
        body = defs.get(function.id) if isinstance(function, ast.Name) else function
        if body is not None:
            inside[id(node)] = {id(n) for n in ast.walk(body)}
    out = set()
    found_ids = {id(node) for node, _ in found}
    for node, _ in found:  # the other pmaps inside it: a set meet, not a scan of every pmap
        for other in (inside.get(id(node), set()) & found_ids) - {id(node)}:
            out.update((id(node), other))
    return out


@dataclasses.dataclass
class Contract:
    site: ContractSite
    span: tuple[int, int]
    text: str
    lines: range  # where its fallback findings stand: the call, or the decorated def


def contract_sites(module, taken_spans: list[tuple[int, int]], skip: set[int],
                   findings: list, multiprocess: bool = False) -> tuple[list[Contract], list, dict]:
    """The pmaps the global sites did not take, in the contract form where their options
    allow; returns them and the findings, where each one's PM600 replaces the fallback
    findings on its own lines (their reasons go into it). `skip`: ids of pmap nodes that are
    host barriers. Also returns, per pmap node left faithful, what the contract form could not
    write. `multiprocess`: the module runs under jax.distributed (see the module docstring)."""
    tree, imported = module.tree, module.imported
    found = pmap_nodes(tree, imported)
    skip = skip | nested(found, tree)
    source_of = lambda node: module.source[slice(*module.span(node))].decode("utf-8")
    jits = {id(n.args[0]): n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and dotted(n.func, imported) == JIT and len(n.args) == 1}  # jax.jit(<pmap>, ...)
    contracts, notes = [], {}
    for node, function in found:
        span = module.span(node)
        if id(node) in skip or any(a <= span[0] and span[1] <= b for a, b in taken_spans):
            continue
        try:
            site = contract_options(node, imported, source_of)
            if site.devices and _may_be_none(node, tree):
                raise NotExpressible("devices= is a parameter that defaults to None (pmap's "
                                     "default devices), which the contract form cannot tell "
                                     "apart from a list it is given")
        except NotExpressible as why:
            notes[node] = str(why)
            continue
        if site.function is not None:
            line = module.source[module.line_starts[site.function.lineno - 1]:].split(b"\n", 1)[0]
            site.function_indent = len(line) - len(line.lstrip())
        if site.decorator:
            indent = " " * function.col_offset
        else:
            line = module.source[module.line_starts[node.lineno - 1]:].split(b"\n", 1)[0]
            indent = " " * (len(line) - len(line.lstrip()))
        column = node.col_offset - 1 if site.decorator else node.col_offset
        names = module.contract_names
        jit = names[ACROSS_PROCESSES] if multiprocess else f"{module.jax}.jit"
        if not multiprocess:  # a jit the user wrote around the pmap serves as the site's
            span, own_jit = _joined_with_jit(site, function, span, module, jits)
            jit = jit if own_jit else None
        text = contract_text(site, jit, module.partial, source_of, indent, column,
                             names[ADAPTER])
        end = function.end_lineno if site.decorator else node.end_lineno
        # a decorated def's lines start at its first decorator: one above the pmap's may be
        # the reason it keeps the contract (`@tiled` over `@partial(jax.pmap, ...)`)
        start = min(d.lineno for d in function.decorator_list) if site.decorator \
            else node.lineno
        contracts.append(Contract(site, span, text, range(start, end + 1)))
    # With no pmap left faithful, a fallback finding elsewhere (in a caller) says so too.
    contracted = {id(c.site.node) for c in contracts}
    held_by_taken = _Containment(taken_spans)
    none_faithful = all(id(n) in contracted or id(n) in skip or held_by_taken(module.span(n))
                        for n, _ in found)
    folded: dict[int, list[Finding]] = {}  # a contract site's fallback findings, in order
    kept = []
    for finding in findings:
        owner = next((c for c in contracts if finding.line in c.lines
                      and finding.code in _FALLBACK_CODES), None)
        if owner is not None:  # the site's one finding (PM612) names it: not printed apart
            folded.setdefault(id(owner.site.node), []).append(finding)
            continue
        if none_faithful and contracts and finding.code in _FALLBACK_CODES:
            finding = dataclasses.replace(finding, message=_contract_reason(finding.message))
        why_not = next((why for node, why in notes.items() if node.lineno == finding.line),
                       None) if finding.code in _FALLBACK_CODES else None
        if why_not is not None:  # the site stays faithful: say why the floor could not take it
            finding = dataclasses.replace(finding, message=(
                f"{finding.message}; nor can it keep pmap's calling convention: {why_not}"))
        kept.append(finding)
    kept = contract_findings([(c.site.node, c.lines) for c in contracts], folded, kept)
    return contracts, kept, notes


_FALLBACK_CODES = FALLBACKS


def _joined_with_jit(site: ContractSite, function, span: tuple[int, int], module, jits):
    """One jit, not two. Where the user's jit already wraps the pmap (`jax.jit(jax.pmap(f))`,
    a bare `@jax.jit` right above the pmap decorator), the site is the adapter alone under it;
    a bare `@jax.jit` right below is dropped, as it only compiled what the site's jit compiles.
    A site with jit options of its own (donate, static) under the user's jit keeps both jits:
    pmap's donation inside a jit's trace donated nothing, and neither does an inner jit's.
    Returns the span to replace and whether the site writes its own jit."""
    own_options = bool(site.static or site.donate)
    if not site.decorator:
        return span, own_options or id(site.node) not in jits
    decorators = function.decorator_list
    at = next(i for i, d in enumerate(decorators) if d is site.node)
    bare = lambda d: not isinstance(d, ast.Call) and dotted(d, module.imported) == JIT
    start, end = span
    if at + 1 < len(decorators) and bare(decorators[at + 1]) and not site.static:
        end = module.span(decorators[at + 1])[1]
    return (start, end), own_options or not (at > 0 and bare(decorators[at - 1]))


def _may_be_none(node: ast.AST, tree: ast.Module) -> bool:
    """The pmap's `devices=` is a name that is a parameter of its function with the default
    None, never bound again there."""
    devices = next((k.value for k in getattr(node, "keywords", ()) if k.arg == "devices"), None)
    if not isinstance(devices, ast.Name):
        return False
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or \
                not any(n is node for n in ast.walk(function)):
            continue
        arguments = function.args
        positional = [*arguments.posonlyargs, *arguments.args]
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]],
                            arguments.defaults))
        defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)
                         if d is not None})
        default = defaults.get(devices.id)
        rebound = any(isinstance(n, ast.Name) and n.id == devices.id
                      and isinstance(n.ctx, ast.Store) for n in ast.walk(function))
        if isinstance(default, ast.Constant) and default.value is None and not rebound:
            return True
    return False

def _contract_reason(message: str) -> str:
    """A fallback finding's message, saying what the site keeps now: pmap's calling contract
    (contract.py), not the faithful style."""
    for said, instead in (("kept in the faithful style", "kept with pmap's calling convention"),
                          (" stays faithful: ", " keeps pmap's calling convention: ")):
        message = message.replace(said, instead)
    return message
