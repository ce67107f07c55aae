"""numpy's semantics for values in pmap's stacked layout (`Kind("same", rows=True)`: the device
count is the leading axis, where the value has one): which indexing and which broadcasting
arithmetic keep that leading axis, and with what rank. Pure functions of the AST and the
operands' kinds; expressions.py applies them.

The fact a rows value carries is "its axis 0, if it has one, is the device count n". A value
numpy leaves without axes (`x[..., 0]` of an x of rank 1) meets it trivially: pmap, `.shape[0]`
and `len` of it raise in the original program as well.
"""

from __future__ import annotations

import ast

from transforms.global_view.values import VMAP, Kind

_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
                ast.BitAnd, ast.BitOr, ast.BitXor)


def _literal_int(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _constant(node, value) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _full_slice(node) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None \
        and node.step is None


def basic_index(index) -> list | None:
    """The elements of a basic numpy index (literal ints, slices, None, at most one Ellipsis),
    or None for any other index: an array or a name may be advanced indexing, which can move
    the indexed axes to the front."""
    elements = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    if not elements or sum(_constant(e, Ellipsis) for e in elements) > 1:
        return None
    if all(_literal_int(e) or isinstance(e, ast.Slice) or _constant(e, None)
           or _constant(e, Ellipsis) for e in elements):
        return elements
    return None


def indexed_rows(kind: Kind, elements: list) -> Kind | None:
    """The kind of `x[elements]` (a basic index) for x in pmap's stacked layout, where the
    result keeps x's leading device axis: a first element `:` (`x[:, None, None]`), or a first
    Ellipsis that covers axis 0 (`x[..., 0]`). Where the leading axis is indexed, sliced or
    pushed back (`x[0]`, `x[1:]`, `x[None]`), or that depends on a rank not known, a plain
    value: of its rank where x's is known, else None. The rank of the result is x's less the
    ints plus the Nones."""
    consumed = sum(1 for e in elements if _literal_int(e) or isinstance(e, ast.Slice))
    rank = kind.rank
    if rank is not None and consumed > rank:
        return None  # an IndexError in the original
    if rank is not None:
        rank = rank - sum(1 for e in elements if _literal_int(e)) \
            + sum(1 for e in elements if _constant(e, None))
    plain = None if rank is None else Kind("same", rank=rank)
    if not kind.rows:
        return plain
    first, rest = elements[0], elements[1:]
    if _full_slice(first):
        pass
    elif _constant(first, Ellipsis):
        if kind.rank is None and not all(_literal_int(e) or _full_slice(e) for e in rest):
            # Were x of rank `consumed`, the Ellipsis would cover no axis and a None or a
            # partial slice after it would make the leading axis
            return None
        if kind.rank == consumed and rest and not (
                _full_slice(rest[0]) or all(_literal_int(e) for e in rest)):
            return plain
    else:
        return plain
    return Kind("same", rank=rank, rows=True)


def broadcast_rows(op, left: Kind, right: Kind) -> Kind | None:
    """The kind of `left op right` (an elementwise operator, neither value changed by the
    migration) where numpy's broadcasting keeps a stacked operand's leading device axis: the
    other operand has fewer axes (a number, `x * scale[None]`'s lower-rank side), or is in
    pmap's stacked layout with as many. Broadcasting aligns shapes on their last axes, so only
    an operand of the highest rank gives the result its leading axis. None otherwise."""
    if not isinstance(op, _ELEMENTWISE):
        return None
    for rows, other in ((left, right), (right, left)):
        if not rows.rows:
            continue
        other_rank = 0 if other.tag == "devcount" else other.rank
        if other_rank == 0 and not other.rows:
            return Kind("same", rank=rows.rank, rows=True)
        if rows.rank is None or other_rank is None:
            continue
        if other.rows and other_rank == rows.rank or not other.rows and other_rank < rows.rank:
            return Kind("same", rank=rows.rank, rows=True)
    return None


def shape_lead(kind: Kind) -> bool:
    """`x.shape[0]` or `len(x)` of x in pmap's stacked layout is the device count."""
    return kind.tag == "same" and kind.rows and not kind.changed


def literal_axis(node, rank: int | None) -> int | None:
    """A literal int axis, made non-negative where the rank says how (`-1` of rank 3 is 2);
    None for anything else, or a negative axis of unknown rank."""
    if not _literal_int(node):
        return None
    axis = ast.literal_eval(node)
    if axis < 0:
        if rank is None or axis < -rank:
            return None
        axis += rank
    return axis


def joined_rank(kinds: list[Kind]) -> int | None:
    """The one rank of several stacked values, or None where any is unknown or they differ."""
    ranks = {kind.rank for kind in kinds}
    return ranks.pop() if len(ranks) == 1 else None


def vmapped_arguments(call: ast.Call, qualified) -> list | None:
    """The arguments `jax.vmap(f, in_axes=..., out_axes=0)(...)` maps on axis 0, or None for
    any other call. With out_axes 0 every leaf of its result leads with the mapped axis, whose
    size every mapped leaf shares: one mapped argument in pmap's stacked layout makes the
    result so too. in_axes: absent, 0, or a tuple of 0 / None (one entry per argument);
    `qualified`: the caller's name resolver (`jax.vmap` however imported)."""
    vmap = call.func
    if not (isinstance(vmap, ast.Call) and qualified(vmap.func) in VMAP and len(vmap.args) == 1
            and not call.keywords and not any(isinstance(a, ast.Starred) for a in call.args)):
        return None
    options = {k.arg: k.value for k in vmap.keywords}
    if set(options) - {"in_axes", "out_axes"} or not _zero_or_absent(options.get("out_axes")):
        return None
    in_axes = options.get("in_axes")
    if _zero_or_absent(in_axes):
        return list(call.args)
    if isinstance(in_axes, ast.Tuple) and len(in_axes.elts) == len(call.args) and all(
            _zero_or_absent(e) or _constant(e, None) for e in in_axes.elts):
        return [a for a, e in zip(call.args, in_axes.elts) if _zero_or_absent(e)]
    return None


def _zero_or_absent(node) -> bool:
    """An option left out (vmap's in_axes and out_axes default to 0) or the literal 0."""
    return node is None or isinstance(node, ast.Constant) and type(node.value) is int \
        and node.value == 0
