"""Which steps wait for every process, read from the mapped function's own text.

A step whose body runs a collective over its axis (psum, pmean, all_gather, ...) cannot finish
until the devices of every process have joined it, in pmap as in a global jit. Such a call is
a meeting point: in any run of the original that does not hang, every process makes it, the
same number of times. multiprocess.py uses this twice. A collective step under a condition
that reads a process's index is reported, since the original cannot run it on more than one
process. And a `jax.device_put(v, P())` written into the same call, which waits for every
process too, is safe there because every process reaches it together.
"""

from __future__ import annotations

import ast

from transforms.global_view.sites import Site, dotted

COLLECTIVES = {f"jax.lax.{name}" for name in (
    "psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute",
    "pshuffle", "pswapaxes")}
# Code whose collectives may not run on every call: traced control flow is Python here, and
# a nested function may be a lax.cond branch.
_MAYBE_SKIPPED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.If,
                  ast.For, ast.AsyncFor, ast.While, ast.Try, ast.IfExp, ast.BoolOp,
                  ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def has_collectives(site: Site, imported: dict[str, str]) -> bool:
    """Whether the mapped function calls a collective anywhere in its own text."""
    return any(isinstance(node, ast.Call) and dotted(node.func, imported) in COLLECTIVES
               for node in ast.walk(site.body))


def waits_for_every_process(site: Site, imported: dict[str, str]) -> bool:
    """Whether every call of the step runs a collective over its whole axis: one called in the
    mapped function's own body, outside any branch, loop or nested function, naming the site's
    axis, with no `axis_index_groups`."""
    if site.axis_name is None:
        return False
    body = site.body
    stack = list(body.body) if isinstance(body.body, list) else [body.body]
    while stack:
        node = stack.pop()
        if isinstance(node, _MAYBE_SKIPPED):
            continue
        if isinstance(node, ast.Call) and dotted(node.func, imported) in COLLECTIVES \
                and _names_axis(node, site):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _names_axis(call: ast.Call, site: Site) -> bool:
    if any(k.arg == "axis_index_groups" for k in call.keywords) or len(call.args) > 2:
        return False
    axis = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "axis_name"), None)
    names = axis.elts if isinstance(axis, (ast.Tuple, ast.List)) else [axis]
    for name in names:
        if isinstance(name, ast.Constant) and name.value == site.axis_name:
            return True
        if isinstance(name, ast.Name) and site.constants.get(name.id) == site.axis_name:
            return True
    return False
