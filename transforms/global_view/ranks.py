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
# Functions that give back one array (never a tuple of them).
ARRAY_FUNCTIONS = {f"jax.numpy.{f}" for f in (
    "sum", "mean", "max", "min", "prod", "std", "var", "dot", "matmul", "einsum", "stack",
    "concatenate", "reshape", "transpose", "argmax", "argmin", "any", "all", "asarray", "array",
    "square", "linalg.norm", "cumsum", "take", "expand_dims", "squeeze", "ravel")} | {
    f"jax.random.{f}" for f in ("normal", "uniform", "bernoulli", "randint", "fold_in",
                                "categorical", "permutation")}
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


# Functions of numbers that act on each element alone, so a (1,) block gives the (1,) result.
COLLECTIVES = {f"jax.lax.{f}" for f in ("psum", "pmean", "pmax", "pmin")}


def leading_axis_transparent(site: Site, imported: dict[str, str]) -> bool:
    """Whether the body computes the same numbers from (1,) blocks as from scalars: its
    results are built from its parameters only by arithmetic, elementwise functions and
    psum / pmean / pmax / pmin (literal axis_index_groups allowed), each result from at least
    one parameter (a constant result would stay a scalar)."""
    body = site.body
    params = set(site.params)
    if isinstance(body, ast.Lambda):
        statements, value = [], body.body
    else:
        statements = list(body.body)
        if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
            statements = statements[1:]
        if not statements or not isinstance(statements[-1], ast.Return) or statements[-1].value is None:
            return False
        statements, value = statements[:-1], statements[-1].value
    derived = set(params)  # names holding blocks computed from parameters
    plain: set[str] = set()  # names holding numbers computed from constants only
    for statement in statements:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)):
            return False
        found = _elementwise(statement.value, derived, plain, imported)
        if found is None:
            return False
        name = statement.targets[0].id
        (derived if found else plain).add(name)
        (plain if found else derived).discard(name)
    leaves = value.elts if isinstance(value, ast.Tuple) else \
        value.values if isinstance(value, ast.Dict) and None not in value.keys else [value]
    return all(_elementwise(leaf, derived, plain, imported) for leaf in leaves)


def _elementwise(node, derived: set[str], plain: set[str], imported) -> bool | None:
    """None: not elementwise; True: built from a parameter; False: from constants only."""
    if isinstance(node, ast.Name):
        return True if node.id in derived else False if node.id in plain else None
    if isinstance(node, ast.Constant):
        return False if type(node.value) in (int, float) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _elementwise(node.operand, derived, plain, imported)
    if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
        parts = [_elementwise(node.left, derived, plain, imported),
                 _elementwise(node.right, derived, plain, imported)]
        return None if None in parts else any(parts)
    if isinstance(node, ast.Call):
        name = dotted(node.func, imported)
        if name in COLLECTIVES and node.args and all(
                k.arg in ("axis_name", "axis_index_groups") for k in node.keywords):
            extra = [*node.args[1:], *(k.value for k in node.keywords)]
            if not all(_literal(e) for e in extra):
                return None
            return _elementwise(node.args[0], derived, plain, imported)
        if name in ELEMENTWISE and name not in COLLECTIVES and name != "jax.lax.ppermute" \
                and not node.keywords:
            parts = [_elementwise(a, derived, plain, imported) for a in node.args]
            return None if None in parts or not parts else any(parts)
    return None


def _literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def array_results(site: Site, imported: dict[str, str], functions=None) -> list | None:
    """For each leaf the body returns (tuple / list / dict literals split), whether its code
    shows it is one array, not a tuple or list of them (True), or that it is a tree shaped
    like one of the parameters (that parameter's name, from `tree_map(f, param, ...)`), or
    neither (False): so that the caller's `out[0]` can only be device 0's row. None when the
    body's results cannot be read this way. `functions`: module functions it may call."""
    body = site.body
    if isinstance(body, ast.Lambda):
        value, statements = body.body, []
    else:
        statements = [s for s in body.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if not statements or not isinstance(statements[-1], ast.Return) or statements[-1].value is None:
            return None
        statements, value = statements[:-1], statements[-1].value
    arrays: dict = {}
    context = (imported, functions or {}, set(site.params))
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    shown = _is_array(node.value, arrays, context)
                    arrays[target.id] = arrays.get(target.id, True) and shown
                elif isinstance(target, ast.Tuple) and target.elts \
                        and isinstance(target.elts[0], ast.Name) and _value_and_grad(node.value, context[0]):
                    arrays[target.elts[0].id] = arrays.get(target.elts[0].id, True)  # the loss
                    for element in target.elts[1:]:
                        for name in ast.walk(element):
                            if isinstance(name, ast.Name):
                                arrays[name.id] = False
                else:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            arrays[name.id] = False
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
                for name in ast.walk(getattr(node, "target", node)):
                    if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                        arrays[name.id] = False
    if isinstance(value, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in value.elts):
        return [_is_array(e, arrays, context) for e in value.elts]
    if isinstance(value, ast.Dict) and None not in value.keys:
        return [_is_array(v, arrays, context) for v in value.values]
    return [_is_array(value, arrays, context)]


def _value_and_grad(node, imported) -> bool:
    """`jax.value_and_grad(f)(...)` without has_aux: its first result is the scalar loss."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Call)
            and dotted(node.func.func, imported) == "jax.value_and_grad"
            and not any(k.arg == "has_aux" for k in node.func.keywords))


def _is_array(node, arrays: dict, context, depth: int = 0):
    """True: one array; a parameter's name: a tree shaped like it; False: not shown."""
    imported, functions, params = context
    if isinstance(node, ast.Name):
        return arrays.get(node.id, node.id if node.id in params else False)
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool)
    if isinstance(node, ast.BinOp):
        # With an array on either side the result is an array (jnp broadcasts the other
        # operand, a tuple included); a parameter's name: an array if that argument is one.
        sides = [_is_array(side, arrays, context, depth) for side in (node.left, node.right)]
        if True in sides:
            return True
        return next((side for side in sides if isinstance(side, str)), False)
    if isinstance(node, ast.UnaryOp):
        return _is_array(node.operand, arrays, context, depth)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape" and isinstance(node.slice, ast.Constant) \
            and type(node.slice.value) is int:
        return True  # `x.shape[k]`: an int, which a collective gives back as one array
    if isinstance(node, ast.Call):
        name = dotted(node.func, imported)
        if name in COLLECTIVES | {"jax.lax.all_gather", "jax.lax.ppermute", "jax.lax.psum_scatter",
                                  "jax.lax.all_to_all"}:
            return bool(node.args) and _is_array(node.args[0], arrays, context, depth)
        if name == "jax.lax.axis_index":
            return True
        if name in ELEMENTWISE | SHAPED_LIKE | FILLS | ARRAY_FUNCTIONS:
            return True
        if name in ("jax.tree_util.tree_map", "jax.tree.map") and len(node.args) >= 2:
            tree = _is_array(node.args[1], arrays, context, depth)
            return tree if tree is True or isinstance(tree, str) else False
        if isinstance(node.func, ast.Attribute) and node.func.attr == "astype":
            return _is_array(node.func.value, arrays, context, depth) is True
        if isinstance(node.func, ast.Name) and node.func.id in functions and depth < 2:
            function = functions[node.func.id]  # a module function: all its returns arrays
            returns = [r.value for r in ast.walk(function) if isinstance(r, ast.Return)]
            inner = (imported, functions, set())
            return bool(returns) and all(
                r is not None and _is_array(r, {}, inner, depth + 1) is True for r in returns)
    return False
