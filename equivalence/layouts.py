"""`check --style global`: compare the original's outputs with the migrated ones through the
layout map the migration records (transforms/global_view/layout.py; `check` takes it from its
own migration's `FileResult.layouts` and hands it over in `CheckOptions.layouts`).

A replicated stack must have equal rows along its device axis, then row 0 is compared; a
merged array is compared after the device axis is merged into the next one. Leaves the map
does not name are compared as they are.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transforms.global_view.layout import MERGED, REPLICATED, layout_for


@dataclasses.dataclass
class LayoutNote:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def to_migrated_layout(output: dict, layouts) -> tuple[dict, list[LayoutNote], list[str]]:
    """The original's saved output with each mapped leaf in the migrated layout; problems
    (a replicated stack whose rows differ, a shape that cannot be merged) and what was done."""
    arrays = dict(output["arrays"])
    leaves, problems, done = [], [], []
    for leaf in output["leaves"]:
        layout = layout_for(leaf["path"], layouts) if "key" in leaf else None
        if layout is None:
            leaves.append(leaf)
            continue
        array = arrays[leaf["key"]]
        axis = layout.axis
        if array.ndim <= axis + (layout.kind == MERGED):
            problems.append(LayoutNote(leaf["path"], f"rank {array.ndim} has no device axis at {axis}"))
            leaves.append(leaf)
            continue
        if layout.kind == REPLICATED:
            rows = np.moveaxis(array, axis, 0)
            first = rows[0]
            unequal = [i for i in range(1, rows.shape[0]) if not _same(first, rows[i])]
            if unequal:
                problems.append(LayoutNote(leaf["path"], f"the replicated stack's rows {unequal} "
                                           "differ from row 0"))
            array = first
            done.append(f"{leaf['path']}: replicated, row 0 of axis {axis} compared")
        else:
            shape = array.shape
            array = array.reshape(shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:])
            done.append(f"{leaf['path']}: merged axes {axis} and {axis + 1}")
        arrays[leaf["key"]] = array
        leaves.append({**{k: v for k, v in leaf.items() if k != "sharding"},
                       "shape": list(array.shape)})
    return {**output, "arrays": arrays, "leaves": leaves}, problems, done


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


INFERRED_NOTE = ("layouts inferred from the shapes: the migration records no layout map for "
                 "a notebook's globals (top-level code), only for functions' returns")


def inferred_layouts(original: dict, migrated: dict, devices: int) -> tuple:
    """The layout of each leaf of a notebook's globals, read off the two outputs' shapes
    (`check --style global` on a notebook entry, see INFERRED_NOTE): a leaf whose original
    shape is the migrated shape with a device axis inserted, (*a, devices, *s) against
    (*a, *s), is a replicated stack on that axis, one of (*a, devices, b, *s) against
    (*a, devices * b, *s) a merged one. The device axis is looked for from axis 0 on: a list
    of per-step metrics, stacked by the original as (steps, devices), has it at 1. Neither
    hides a wrong value: to_migrated_layout still requires a replicated stack's rows to be
    equal, and compares every value."""
    from transforms.global_view.layout import OutputLayout

    shapes = {leaf["path"]: leaf["shape"] for leaf in migrated["leaves"] if "key" in leaf}
    found = []
    for leaf in original["leaves"]:
        mine, theirs = leaf.get("shape"), shapes.get(leaf["path"])
        if "key" not in leaf or theirs is None or devices not in (mine or []):
            continue
        layout = _device_axis(mine, theirs, devices)
        if layout is not None:
            found.append(OutputLayout(leaf["path"], *layout))
    return tuple(found)


def _device_axis(mine: list, theirs: list, devices: int) -> tuple[str, int] | None:
    """(REPLICATED or MERGED, axis) of the first axis that explains `mine` against `theirs`."""
    for axis, size in enumerate(mine):
        if size != devices:
            continue
        if mine[:axis] + mine[axis + 1:] == theirs:
            return REPLICATED, axis
        if len(mine) > axis + 1 and (mine[:axis] + [size * mine[axis + 1]] + mine[axis + 2:]
                                     == theirs):
            return MERGED, axis
    return None
