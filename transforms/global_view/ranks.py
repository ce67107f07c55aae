"""The least rank of each result of a pmap body, per device, read from the body's code.

A per-device result can come back merged (`out_specs=P(axis)`: the device axis merged into the
result's own leading axis) only if every device's result has a leading axis: a per-device
scalar has none, and shard_map would refuse it. So a result counts as mergeable only when the
body's code shows its rank is at least 1: it is built from a mapped argument of known rank by
elementwise functions, arithmetic, matrix products, a few collectives that keep the rank, or
`zeros(x.shape)`-like fills. Anything else has least rank 0 ("not shown"), and the site keeps
pmap's stacked layout instead.
"""

from __future__ import annotations

import ast

from transforms.global_view.sites import Site, dotted

# Functions whose result has the broadcast rank of their array arguments.
ELEMENTWISE = {f"jax.numpy.{f}" for f in (
    "tanh", "exp", "log", "log1p", "expm1", "sin", "cos", "sqrt", "abs", "negative", "square",
    "logaddexp", "maximum", "minimum", "where", "sign", "floor", "ceil", "round", "clip",
    "reciprocal", "power", "add", "subtract", "multiply", "divide", "tan", "arctan", "sinh",
    "cosh", "float32", "int32")} | {f"jax.nn.{f}" for f in (
    "relu", "sigmoid", "softplus", "gelu", "silu", "elu", "leaky_relu", "tanh")} | {
    "jax.lax.psum", "jax.lax.pmean", "jax.lax.pmax", "jax.lax.pmin", "jax.lax.ppermute"}
SHAPED_LIKE = {f"jax.numpy.{f}" for f in ("zeros_like", "ones_like", "full_like", "empty_like")}
FILLS = {f"{m}.{f}" for m in ("jax.numpy", "numpy") for f in ("zeros", "ones", "full", "empty")}


def least_result_ranks(site: Site, param_ranks: dict[str, int], imported: dict[str, str]) \
        -> list[int] | None:
    """The least per-device rank of each leaf the body returns (tuple and dict literals are
    split into their elements), or None when the body's results cannot be read this way.
    `param_ranks`: the per-device rank of each parameter where the caller knows it."""
    body = site.body
    if isinstance(body, ast.Lambda):
        if {a.arg for a in body.args.args} & set(_stored(body.body)):
            return None
        return _leaves(body.body, dict(param_ranks), imported)
    ranks = dict(param_ranks)
    statements = list(body.body)
    if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]  # the docstring
    if not statements or not isinstance(statements[-1], ast.Return) or statements[-1].value is None:
        return None
    for statement in statements[:-1]:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name):
            ranks[statement.targets[0].id] = least_rank(statement.value, ranks, imported)
        else:  # any other statement: every name it binds is unknown afterwards
            for name in _stored(statement):
                ranks[name] = 0
            if any(isinstance(n, ast.Return) for n in ast.walk(statement)):
                return None
    return _leaves(statements[-1].value, ranks, imported)


def _stored(node) -> list[str]:
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)]
    names += [n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return names


def _leaves(node, ranks, imported) -> list[int]:
    if isinstance(node, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return [r for e in node.elts for r in _leaves(e, ranks, imported)]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return [r for v in node.values for r in _leaves(v, ranks, imported)]
    return [least_rank(node, ranks, imported)]


def least_rank(node, ranks: dict[str, int], imported: dict[str, str]) -> int:
    """A lower bound of the rank of an array expression (0 when nothing is shown)."""
    if isinstance(node, ast.Name):
        return ranks.get(node.id, 0)
    if isinstance(node, ast.BinOp):
        left, right = least_rank(node.left, ranks, imported), least_rank(node.right, ranks, imported)
        if isinstance(node.op, ast.MatMult):
            # (..., a, b) @ (b, c) keeps the left rank; any product loses at most one axis.
            return max(left, right) - 1 if max(left, right) >= 2 else 0
        return max(left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return least_rank(node.operand, ranks, imported)
    if isinstance(node, ast.Call):
        name = dotted(node.func, imported)
        arrays = [*node.args, *(k.value for k in node.keywords if k.arg in (None, "x", "y"))]
        if name in ELEMENTWISE:
            if name == "jax.lax.ppermute" or name.startswith("jax.lax.p"):
                arrays = node.args[:1]
            return max((least_rank(a, ranks, imported) for a in arrays), default=0)
        if name in SHAPED_LIKE and node.args:
            return least_rank(node.args[0], ranks, imported)
        if name in FILLS and node.args:
            shape = node.args[0]
            if isinstance(shape, ast.Attribute) and shape.attr == "shape":
                return least_rank(shape.value, ranks, imported)
            if isinstance(shape, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in shape.elts):
                return len(shape.elts)
            return 0
        if name == "jax.lax.all_to_all" and node.args:
            return least_rank(node.args[0], ranks, imported)
        if name == "jax.lax.psum_scatter" and node.args:
            rank = least_rank(node.args[0], ranks, imported)
            tiled = next((k.value for k in node.keywords if k.arg == "tiled"), None)
            if isinstance(tiled, ast.Constant) and tiled.value is True:
                return rank
            return max(rank - 1, 0)
        if name == "jax.lax.all_gather" and node.args:
            rank = least_rank(node.args[0], ranks, imported)
            tiled = next((k.value for k in node.keywords if k.arg == "tiled"), None)
            if isinstance(tiled, ast.Constant) and tiled.value is True:
                return rank
            return rank + 1
        if isinstance(node.func, ast.Attribute) and node.func.attr == "astype":
            return least_rank(node.func.value, ranks, imported)
    return 0
