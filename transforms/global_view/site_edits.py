"""The text of a global site: `jax.jit(jax.shard_map(body, mesh=_mesh(axis), in_specs,
out_specs, check_vma=False))` in place of the pmap (a jitted def at module level and for
decorated sites, step_text.py), the expands and squeezes its body needs, and the composition
of these edits with the callers' edits (`compose`)."""

from __future__ import annotations

import ast
import bisect
import io
import itertools
import re
import tokenize

from transforms.global_view.axes import MESH, fresh_name
from transforms.global_view.callers import MODULE_CALLER
from transforms.global_view.dataflow import CallerResult
from transforms.global_view.module_info import ModuleInfo, first_body_statement, own_returns
from transforms.global_view.record_specs import (
    RECORD_OUT,
    RECORD_SPEC,
    parse_record_spec,
    returned_record_edits,
    spec_line,
)
from transforms.global_view.record_specs import squeezed as squeezed_record
from transforms.global_view.replication import result_elements
from transforms.global_view.sites import Site, dotted
from transforms.global_view.step_text import LINE_LIMIT, shifted, step_def
from transforms.global_view.values import (
    AXIS_PLACEHOLDER,
    MERGED_OUT,
    MESH_PLACEHOLDER,
    SCALARS_OUT,
    STACKED_SPEC,
    quoted,
    stacked_axis,
    tuple_text,
)


def compose(edits: dict, site_edits: dict, module: ModuleInfo) -> tuple[int, int] | None:
    """Add the sites' edits to the callers' edits (in place). A caller's edit may contain a
    site (`jax.pmap(f)(x)[0]` becomes direct use around the inline site): its text holds the
    site's source verbatim, which is replaced by the site's text. Returns the span of an
    overlap that cannot be joined so (None when all joined)."""
    callers = list(edits)  # the sites' own edits never overlap each other
    touching = _Touching(callers)
    for span, text in sorted(site_edits.items()):
        near = touching(span)  # only these can hold, lie within or cross the span
        outer = [c for c in near if within(span, c) and c != span]
        inner = [c for c in near if within(c, span) and c != span and span[0] != span[1]]
        crossing = [c for c in near if c[0] < span[1] and span[0] < c[1] and c not in outer
                    and c not in inner]
        if inner or crossing or (span in edits and edits[span] != text):
            return span
        original = module.source[span[0]:span[1]].decode("utf-8")
        for container in outer:
            if edits[container].count(original) != 1 or span[0] == span[1]:
                return span
            edits[container] = edits[container].replace(original, text)
        if not outer:
            edits[span] = text
    return None


class _Touching:
    """The spans of a list that meet a given span (start <= its end and end >= its start), in
    the list's order: found by start, so a module's thousands of sites are not each compared
    with every caller's edit."""

    def __init__(self, spans: list[tuple[int, int]]):
        self.spans = spans
        self.by_start = sorted(range(len(spans)), key=lambda i: spans[i][0])
        self.starts = [spans[i][0] for i in self.by_start]
        self.reach = list(itertools.accumulate((spans[i][1] for i in self.by_start), max))

    def __call__(self, span: tuple[int, int]) -> list[tuple[int, int]]:
        found = []
        k = bisect.bisect_right(self.starts, span[1]) - 1  # the last to start by its end
        while k >= 0 and self.reach[k] >= span[0]:  # reach: the furthest end up to k
            if self.spans[self.by_start[k]][1] >= span[0]:
                found.append(self.by_start[k])
            k -= 1
        return [self.spans[i] for i in sorted(found)]


def site_usage(result: CallerResult, key: str) -> tuple[tuple[str, ...], str, str]:
    """(in_specs, result mode, mesh axis) of a site as one caller uses it."""
    own = result.site_axes.get(key, result.axis)  # the axis of the mesh the site runs under
    return tuple(s.replace(AXIS_PLACEHOLDER, quoted(own)) for s in result.specs[key]), \
        result.modes[key], own


def out_specs_text(site: Site, mode, axis: str) -> str:
    """out_specs text: P() for replicated results, P(axis) (after pmap's out_axes position of
    Nones) for results that keep their device axis; a tuple / dict of them for out_axes trees."""
    def spec(one_mode: str) -> str:
        if one_mode.startswith(RECORD_OUT):  # the record's own in_specs (global_site_edits)
            return RECORD_SPEC + one_mode.removeprefix(RECORD_OUT)
        if one_mode in (MERGED_OUT, SCALARS_OUT):  # leading axis: the merged device axis
            return f"P({quoted(axis)})"
        at = stacked_axis(one_mode)
        return "P()" if at is None else f"P({'None, ' * at}{quoted(axis)})"

    if isinstance(mode, tuple) and isinstance(site.out_tree, dict):
        return "{" + ", ".join(f"{quoted(k)}: {spec(m)}" for k, m in zip(site.out_tree, mode)) + "}"
    if isinstance(mode, tuple):
        return tuple_text([spec(m) for m in mode])
    return spec(mode)


def stacked_positions(site: Site, specs) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The in_specs texts without their stacked marks, and the positions (pmap's numbering)
    of the arguments they mark: those the body squeezes on entry."""
    mapped = [i for i in range(len(site.params)) if i not in site.static]
    rows = tuple(mapped[k] for k, spec in enumerate(specs) if spec.endswith(STACKED_SPEC))
    return tuple(spec.removesuffix(STACKED_SPEC) for spec in specs), rows


def global_site_edits(site: Site, specs, out_specs: str, mode: str, module: ModuleInfo,
                      axis: str, stacked: tuple[int, ...] = ()) -> dict:
    """The edits of one global site: its pmap expression, and with per-device results an
    expand of every value the body returns (pmap's stacked output layout, kept). Records
    with per-device fields (record_specs.py) get their spec built in the step's def."""
    records, specs, out_specs, prelude = _record_specs(site, specs, out_specs, module, axis)
    body_edits = {}
    if stacked and isinstance(site.body, ast.Lambda):  # site_calls.vmapped_lambda
        body_edits[module.span(site.body)] = _vmapped(site, specs, module)
        return _site_edits(site, _options(specs, out_specs, module, axis), module, body_edits)
    values = [site.body.body] if isinstance(site.body, ast.Lambda) else [
        node.value for node in own_returns(site.body) if node.value is not None]
    for value in values:
        if isinstance(mode, tuple):  # out_axes=(0, None, ...) / {...}: every return is such
            keys = list(site.out_tree) if isinstance(site.out_tree, dict) else list(range(len(mode)))
            elements = result_elements(value, keys)
            for key, element_mode in zip(keys, mode):
                if element_mode.startswith(RECORD_OUT):
                    body_edits.update(_record_expanded(
                        module, elements[key], records[element_mode.removeprefix(RECORD_OUT)]))
                elif stacked_axis(element_mode) is not None:
                    body_edits[module.span(elements[key])] = _expanded(
                        module, elements[key], stacked_axis(element_mode))
        elif mode.startswith(RECORD_OUT):
            body_edits.update(_record_expanded(module, value,
                                               records[mode.removeprefix(RECORD_OUT)]))
        elif stacked_axis(mode) is not None:
            body_edits[module.span(value)] = _expanded(module, value, stacked_axis(mode))
        if not isinstance(site.body, ast.Lambda):
            _fit_return(module, value, body_edits, stacked_axis(mode) if isinstance(mode, str)
                        else None)
    body_edits.update(_squeeze_edits(site, module, stacked, records))
    return _site_edits(site, _options(specs, out_specs, module, axis), module, body_edits,
                       prelude)


def _record_specs(site: Site, specs, out_specs: str, module: ModuleInfo, axis: str):
    """The records among the mapped parameters (name -> (rebuild form, per-device fields)),
    the in_specs and out_specs with each record's spec named, and the def's lines that build
    those specs from the arguments."""
    mapped = [p for i, p in enumerate(site.params) if i not in site.static]
    records, named, prelude = {}, [], []
    for param, spec in zip(mapped, specs):
        parsed = parse_record_spec(spec)
        if parsed is None:
            named.append(spec)
            continue
        records[param] = parsed
        name = module.fresh(f"{param}_spec")
        prelude.append(spec_line(name, param, *parsed, module.jax, quoted(axis)))
        named.append(name)
        out_specs = out_specs.replace(RECORD_SPEC + param, name)
    return records, tuple(named), out_specs, prelude


def _record_expanded(module: ModuleInfo, value, record) -> dict:
    """A returned record's per-device fields given their device axis back (spans -> text)."""
    form, fields = record
    edits = returned_record_edits(value, form, fields, lambda node: _source(module, node),
                                  module.jax, module.numpy)
    return {module.span(node): text for node, text in edits.items()}


def _vmapped(site: Site, specs, module: ModuleInfo) -> str:
    """`jax.vmap(lambda ...)` over each device's block of its stacked rows; a replicated
    argument (P()) is passed whole (in_axes None)."""
    text = _source(module, site.body)
    if all(spec != "P()" for spec in specs):
        return f"{module.jax}.vmap({text})"
    axes = tuple_text(["None" if spec == "P()" else "0" for spec in specs])
    return f"{module.jax}.vmap({text}, in_axes={axes})"


def _site_edits(site: Site, options: list[str], module: ModuleInfo, body_edits: dict,
                prelude: list[str] = ()) -> dict:
    """The site's own text, with the `body_edits` inside what it builds made in it.
    `prelude`: lines the step's def runs first (a record's spec): the site becomes a def."""
    if site.decorated:
        return {**body_edits, **_decorated_def_edits(site, options, module)}
    at_module_level = site.owner is None and not site.holder and not site.factory
    built = module.span(site.statement if site.static or at_module_level or site.keyword_params
                        else site.built)
    inside = {k: v for k, v in body_edits.items() if within(k, built)}
    outside = {k: v for k, v in body_edits.items() if k not in inside}
    if site.rebinds is not None and (at_module_level or site.static or site.keyword_params):
        # `step = jax.pmap(step)` becoming `def step`: the body's def is renamed `_step`, or the
        # new def, reading `step` when it runs, would call itself
        private = module.fresh(f"_{site.name}")
        header = module.source[module.span(site.rebinds)[0]:].decode("utf-8")
        name_at = module.span(site.rebinds)[0] + re.match(r"def\s+", header).end()
        return {**outside, (name_at, name_at + len(site.name)): private,
                built: _step_def(site, options, module, inside, private)}
    if prelude:  # records.py `_record_spec_refused`: `name = jax.pmap(f, ...)` in a function
        built = module.span(site.statement)
        inside = {k: v for k, v in body_edits.items() if within(k, built)}
        outside = {k: v for k, v in body_edits.items() if k not in inside}
        text = _arguments_read_once(site, module, inside) + _step_def(
            site, options, module, inside, prelude=prelude)
        lines = module.source.splitlines()
        above = lines[site.statement.lineno - 2].strip() if site.statement.lineno > 1 else b""
        if above and not above.endswith(b":"):  # a blank line before a nested def (E306)
            line_start = module.line_starts[site.statement.lineno - 1]
            built, text = (line_start, built[1]), "\n" + " " * site.statement.col_offset + text
        return {**outside, built: text}
    if site.static or at_module_level or site.keyword_params:
        bindings = _arguments_read_once(site, module, inside)
        return {**outside, built: bindings + _step_def(site, options, module, inside)}
    return {**outside, built: _site_text(site, options, module, inside)}


def _arguments_read_once(site: Site, module: ModuleInfo, inner_edits: dict) -> str:
    """`label_smoothing = config.label_smoothing`, one line each, for the values other than
    constants and names a `functools.partial` site binds (`partial(train_step,
    label_smoothing=config.x, metrics_fn=model.metrics_fn("train"))`) where the site becomes
    a jitted def: pmap's partial evaluated them once, where it was built, and the def reads
    the names, bound there, at each trace. `inner_edits` gets the names in their place. The
    names (an attribute's, else the keyword's or the bound parameter's) are new to the
    function the site is built in and to the mapped parameters the def's lambda binds."""
    partial = site.function_node
    if not (isinstance(partial, ast.Call) and partial.args):
        return ""
    read = lambda value: not isinstance(value, (ast.Constant, ast.Name)) and not (
        isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant))
    leading = [a.arg for a in site.body.args.args] if isinstance(site.body, ast.FunctionDef) \
        else []
    attributes = [(k.arg, k.value) for k in partial.keywords if read(k.value)]
    attributes += [(a.attr if isinstance(a, ast.Attribute) else
                    leading[i] if i < len(leading) else "value", a)
                   for i, a in enumerate(partial.args[1:]) if read(a)]
    if not attributes:
        return ""
    owner = module.functions.get(site.owner) if site.owner else None
    taken = {n.id for n in ast.walk(owner) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(owner) if isinstance(a, ast.arg)} if owner is not None else set()
    taken |= set(site.params)
    line = module.source.splitlines()[site.statement.lineno - 1].decode("utf-8")
    indent = line[:len(line) - len(line.lstrip())]
    lines = []
    for name, value in attributes:
        name = module.fresh(name) if owner is None else fresh_name(name, taken)
        lines.append(f"{name} = {module.render(*module.span(value), inner_edits)}")
        inner_edits[module.span(value)] = name
    return f"\n{indent}".join(lines) + f"\n\n{indent}"


def _options(specs, out_specs: str, module: ModuleInfo, axis: str) -> list[str]:
    """shard_map's keyword arguments: the site's mesh, specs and check_vma=False."""
    return [f"mesh={module.mesh_function}({quoted(axis)})", f"in_specs={tuple_text(specs)}",
            f"out_specs={out_specs}", "check_vma=False"]


def _fit_return(module: ModuleInfo, value, edits: dict, whole_axis: int | None) -> None:
    """Keep a returned value's line within the limit once its results are expanded: a
    tuple / dict literal gets one result per line, a whole expanded value moves into the
    tree.map call's own lines (edits is changed in place)."""
    start, end = module.span(value)
    if value.lineno != value.end_lineno or not any(within(k, (start, end)) for k in edits):
        return
    line_start = module.line_starts[value.lineno - 1]
    line_end = module.line_starts[value.lineno] if value.lineno < len(module.line_starts) - 1 \
        else len(module.source)
    before = module.source[line_start:start].decode("utf-8")
    after = module.source[end:line_end].decode("utf-8").rstrip("\n")
    if len(before) + len(module.render(start, end, edits)) + len(after) <= LINE_LIMIT:
        return
    text = _multiline(module, value, edits, " " * (len(before) - len(before.lstrip())),
                      whole_axis)
    if text is None:
        return
    for key in [k for k in edits if within(k, (start, end))]:
        del edits[key]
    edits[(start, end)] = text


def _multiline(module: ModuleInfo, value, edits: dict, indent: str, whole_axis: int | None):
    """`value` with its edits, spread over lines indented from `indent`: one result per line
    for a tuple / dict literal, or the whole expand call's arguments on their own line."""
    start, end = module.span(value)
    inner = indent + "    "
    if isinstance(value, (ast.Tuple, ast.Dict)) and (start, end) not in edits:
        if isinstance(value, ast.Tuple):
            lines = [module.render(*module.span(e), edits) for e in value.elts]
            opening, closing = "(", ")"
        else:
            lines = [f"{module.render(*module.span(k), edits)}: "
                     f"{module.render(*module.span(v), edits)}"
                     for k, v in zip(value.keys, value.values)]
            opening, closing = "{", "}"
        text = opening + "\n" + "".join(f"{inner}{line},\n" for line in lines) + indent + closing
    elif (start, end) in edits and whole_axis is not None:
        expand = f"lambda y: {module.numpy}.expand_dims(y, {whole_axis})"
        argument = _argument_text(module, value)
        if len(inner) + len(expand) + len(argument) + 2 <= LINE_LIMIT or "\n" in argument:
            text = f"{module.jax}.tree.map(\n{inner}{expand}, {argument}\n{indent})"
        else:  # the results on a line of their own
            text = f"{module.jax}.tree.map(\n{inner}{expand},\n{inner}{argument},\n{indent})"
    else:
        return None
    return text


def _squeeze_edits(site: Site, module: ModuleInfo, stacked: tuple[int, ...],
                   records: dict | None = None) -> dict:
    """in_axes k >= 1, or a stacked argument (k = 0): shard_map hands the body a block with a
    size-1 axis k where pmap handed it the slice without that axis, so the body's first
    statement drops it; a record's per-device fields likewise (`records`)."""
    squeezed = [(p, 0 if i in stacked else a)
                for i, (p, a) in enumerate(zip(site.params, site.in_axes))
                if type(a) is int and (a >= 1 or i in stacked) and i not in site.static]
    if not squeezed and not records:
        return {}
    first = first_body_statement(site.body)
    start = module.statement_start(first)
    indent = " " * first.col_offset
    text = "".join(f"{p} = {module.jax}.tree.map(lambda y: {module.numpy}.squeeze(y, {a}), {p})"
                   f"\n{indent}" for p, a in squeezed)
    text += "".join(squeezed_record(p, form, fields, module.jax, module.numpy) + f"\n{indent}"
                    for p, (form, fields) in (records or {}).items())
    if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        text = text[:-len(indent)] + f"\n{indent}"  # a blank line before a nested def (E306)
    return {(start, start): text}


def _expanded(module: ModuleInfo, value: ast.AST, axis: int = 0) -> str:
    """`value` (a result or a tree of them) with pmap's device axis put back at `axis`."""
    text = _argument_text(module, value)
    return f"{module.jax}.tree.map(lambda y: {module.numpy}.expand_dims(y, {axis}), {text})"


def _argument_text(module: ModuleInfo, value: ast.AST) -> str:
    """The source of `value`, safe as one argument of a call."""
    text = _source(module, value)
    if isinstance(value, ast.Tuple) and not text.startswith("("):
        text = f"({text})"  # an unparenthesised tuple would become several arguments
    return text


def _decorated_def_edits(site: Site, options: list[str], module: ModuleInfo) -> dict:
    """A decorated site: the body keeps its def under a private name, and a jitted def of the
    public name, with pmap's donation and static numbering, hands the mapped arguments to
    shard_map (static ones reach the body by closure, as plain values)."""
    lines = module.line_starts
    first = site.outer_jit or site.node
    start = lines[first.lineno - 1]
    # The decorator lines go; a comment on them stays, on a line of its own where they were.
    removed = module.source[start:lines[site.node.end_lineno]].decode("utf-8")
    indent = removed[:len(removed) - len(removed.lstrip())]
    kept = "".join(f"{indent}{comment}\n" for comment in _comments(removed))
    remove_decorators = {(start, lines[site.node.end_lineno]): kept}
    statement = site.statement
    header = module.source[module.span(statement)[0]:].decode("utf-8")
    name_at = module.span(statement)[0] + re.match(r"def\s+", header).end()  # ASCII up to here
    private = module.fresh(f"_{site.name}")
    rename = {(name_at, name_at + len(site.name)): private}
    end = module.span(statement)[1]
    wrapper = _step_def(site, options, module, {}, private)
    if statement.col_offset:  # a def nested in a function: one blank line, at its indent
        return {**remove_decorators, **rename,
                (end, end): "\n\n" + " " * statement.col_offset + wrapper}
    return {**remove_decorators, **rename, (end, end): "\n\n\n" + wrapper}


def _step_def(site: Site, options: list[str], module: ModuleInfo, inner_edits: dict,
              private: str | None = None, prelude=()) -> str:
    """`@jax.jit` (pmap's static and donated numbering) over `def name(params)` returning
    shard_map of the body (of a lambda of the mapped parameters only, with static ones)."""
    params = ", ".join(site.called_params)
    mapped = ", ".join(p for i, p in enumerate(site.called_params) if i not in site.static)
    if private is not None:
        inner = f"lambda {mapped}: {private}({params})" if site.static else private
    elif isinstance(site.function_node, ast.Lambda) and site.static:
        inner = f"lambda {mapped}: {module.render(*module.span(site.body.body), inner_edits)}"
    elif site.keyword_params or site.static and _is_partial(site, module):
        # the partial's call written out: `f(x, eos_id, config=config, top_k=top_k)`
        inner = f"lambda {mapped}: {_partial_called(site, module, inner_edits)}"
    else:
        function = module.render(*module.span(site.function_node), inner_edits)
        simple = isinstance(site.function_node, (ast.Name, ast.Lambda, ast.Attribute))
        callee = function if simple else f"({function})"
        inner = f"lambda {mapped}: {callee}({params})" if site.static else function
    jit_options = []
    if site.static:
        static = site.static[0] if len(site.static) == 1 else \
            tuple_text([str(i) for i in site.static])
        jit_options.append(f"static_argnums={static}")
    if site.donate:
        jit_options.append(f"donate_argnums={site.donate}")
    line = module.source.splitlines()[site.statement.lineno - 1].decode("utf-8")
    indent = line[:len(line) - len(line.lstrip())]
    return step_def(site.name, params, inner, options, mapped, module.jax, module.partial,
                    jit_options, indent, module.indent_unit, prelude)


def _is_partial(site: Site, module: ModuleInfo) -> bool:
    """The site maps `functools.partial(f, ...)` of a function named `f`."""
    partial = site.function_node
    return isinstance(partial, ast.Call) and bool(partial.args) \
        and isinstance(partial.args[0], ast.Name) and all(k.arg for k in partial.keywords) \
        and dotted(partial.func, module.imported) == "functools.partial"


def _partial_called(site: Site, module: ModuleInfo, inner_edits: dict) -> str:
    """`f(*leading, *positional, k=v, ..., kw=kw, ...)`: `functools.partial(f, *leading,
    k=v)` called as its calls call it, the parameters they pass by keyword passed so again
    (shard_map hands its function positional arguments only)."""
    partial = site.function_node
    def text(node):
        return module.render(*module.span(node), inner_edits)
    positional = [p for p in site.called_params if p not in site.keyword_params]
    arguments = [*(text(a) for a in partial.args[1:]), *positional,
                 *(f"{k.arg}={text(k.value)}" for k in partial.keywords),
                 *(f"{k}={k}" for k in site.keyword_params)]
    return f"{text(partial.args[0])}({', '.join(arguments)})"


def within(span, outer) -> bool:
    return outer[0] <= span[0] and span[1] <= outer[1]


def _source(module: ModuleInfo, node) -> str:
    start, end = module.span(node)
    return module.source[start:end].decode("utf-8")


def _site_text(site: Site, options: list[str], module: ModuleInfo, inner_edits: dict) -> str:
    """`jax.jit(jax.shard_map(f, mesh=..., ...))` where the site is built inside a function
    (the mesh is built when that code runs)."""
    jax = module.jax
    function = module.render(*module.span(site.node.args[0]), inner_edits)
    donate = f", donate_argnums={site.donate}" if site.donate else ""
    joined = ", ".join(options)
    text = f"{jax}.jit({jax}.shard_map({function}, {joined}){donate})"
    line = module.source.splitlines()[site.built.lineno - 1].decode("utf-8")
    indent = line[:len(line) - len(line.lstrip())]
    column = site.built.col_offset
    if "\n" in function:  # the mapped function spans lines: it keeps its shape, moved
        pad = indent + "    "
        function = shifted(function, len(pad) - site.node.args[0].col_offset)
        joined = f",\n{pad}".join(options)
        text = f"{jax}.jit({jax}.shard_map(\n{pad}{function},\n{pad}{joined},\n{indent}){donate})"
    elif column + len(text) > LINE_LIMIT:
        pad = indent + "    "
        lambda_node = site.node.args[0]
        if isinstance(lambda_node, ast.Lambda) and len(pad) + len(function) + 1 > \
                LINE_LIMIT and lambda_node.lineno == lambda_node.end_lineno:
            body = _multiline(module, lambda_node.body, inner_edits, pad, None)
            if body is not None:
                head = module.source[module.span(lambda_node)[0]:module.span(lambda_node.body)[0]]
                function = head.decode("utf-8") + body
        if len(pad) + len(joined) + 1 > LINE_LIMIT:
            joined = f",\n{pad}".join(options)
        text = f"{jax}.jit({jax}.shard_map(\n{pad}{function},\n{pad}{joined},\n{indent}){donate})"
    return text


def caller_edits(results: dict[str, CallerResult], module: ModuleInfo) -> dict:
    """The callers' edits with their mesh axis and mesh name filled in."""
    edits: dict[tuple[int, int], str] = {}
    for caller, result in results.items():
        axis = quoted(result.axis)
        # Top-level code binds no mesh: it names the mesh function, which runs only there
        own = module.span(module.functions[caller]) if caller != MODULE_CALLER else (-1, -1)
        # The caller binds `mesh` on entry; code it reaches elsewhere (the methods of a class
        # it instantiates) names the module's mesh function.
        elsewhere = f"{module.mesh_function}({axis})"
        edits.update({k: v.replace(AXIS_PLACEHOLDER, axis).replace(
            MESH_PLACEHOLDER, MESH if within(k, own) else elsewhere)
            for k, v in result.edits.items()})
    return edits


def _comments(text: str) -> list[str]:
    """The comments in `text` (whole lines of code), in order."""
    try:
        return [token.string for token in tokenize.generate_tokens(io.StringIO(text).readline)
                if token.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return []
