"""Compare two saved outputs: structure, shape, dtype, values with per-dtype tolerances."""

from __future__ import annotations

import dataclasses

import numpy as np

# (rtol, atol) per floating dtype; ints, bools and keys must be equal. float64 gets float32's
# tolerance: without jax_enable_x64 (the default) JAX computes in float32, so a float64 leaf is
# almost always a float32 result converted on the host (np.asarray of Python floats).
TOLERANCES = {
    "float64": (1e-6, 1e-6),
    "float32": (1e-6, 1e-6),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "complex64": (1e-6, 1e-6),
    "complex128": (1e-12, 1e-12),
}


# How many differing positions a difference shows, with the expected and the got value each.
SHOWN_POSITIONS = 5


@dataclasses.dataclass
class Difference:
    path: str
    message: str
    # For a value difference: the first differing positions with expected and got, the max
    # absolute and relative difference and the tolerance used (see value_details).
    values: dict | None = None
    comparable: bool = True  # False: a leaf that is not an array on a side


    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def to_dict(self) -> dict:
        return {"path": self.path, "message": self.message,
                **({"values": self.values} if self.values is not None else {})}


def compare_outputs(original: dict, migrated: dict) -> list[Difference]:
    """Each argument: {"treedef": str, "leaves": [...], "arrays": {key: ndarray}}. The
    original gives the expected values, the migrated side the got ones."""
    if original["treedef"] != migrated["treedef"]:
        return [Difference("<root>", f"structure {original['treedef']} != {migrated['treedef']}")]
    differences = []
    for a, b in zip(original["leaves"], migrated["leaves"]):
        path = a["path"]
        if "key" not in a or "key" not in b:
            kinds = f"{a.get('type', a.get('dtype'))} / {b.get('type', b.get('dtype'))}"
            differences.append(Difference(path, f"not an array ({kinds}); cannot be compared",
                                          comparable=False))
            continue
        x, y = original["arrays"][a["key"]], migrated["arrays"][b["key"]]
        if x.shape != y.shape or x.dtype != y.dtype:
            differences.append(
                Difference(path, f"{x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}")
            )
            continue
        values = value_details(x, y)
        if values:
            differences.append(Difference(path, describe_values(values), values))
    return differences


def tolerance_of(dtype) -> tuple[float, float] | None:
    """(rtol, atol) for a floating dtype, None for one compared exactly."""
    return TOLERANCES.get(str(dtype))


def value_details(x: np.ndarray, y: np.ndarray) -> dict | None:
    """None when `y` (got) matches `x` (expected) within the dtype's tolerance, else what
    numpy.testing shows: how many positions differ, the first few with expected and got, the
    max absolute and relative difference, and the tolerance used."""
    tolerance = tolerance_of(x.dtype)
    wide = np.complex128 if "complex" in str(x.dtype) else np.float64
    numeric = x.dtype.kind in "iufc"
    if tolerance is None:
        mismatch = ~_equal(x, y)
    else:
        rtol, atol = tolerance
        mismatch = ~np.isclose(x.astype(wide), y.astype(wide), rtol=rtol, atol=atol,
                               equal_nan=True)
    mismatch = np.asarray(mismatch)
    if not mismatch.any():
        return None
    positions = np.argwhere(mismatch.reshape(x.shape))[:SHOWN_POSITIONS]
    shown = [{"index": [int(i) for i in index], "expected": _plain(x[tuple(index)]),
              "got": _plain(y[tuple(index)])} for index in positions]
    details = {"differing": int(mismatch.sum()), "size": int(x.size), "dtype": str(x.dtype),
               "tolerance": ({"rtol": tolerance[0], "atol": tolerance[1]} if tolerance
                             else "exact"),
               "first": shown}
    if numeric:
        # As numpy.testing: among the differing positions, relative to a nonzero expected.
        xf, yf = x.astype(wide)[mismatch], y.astype(wide)[mismatch]
        abs_error = np.abs(xf - yf)
        abs_error = np.where(np.isnan(abs_error), np.inf, abs_error)
        nonzero = xf != 0
        details["max_abs"] = float(abs_error.max())
        details["max_rel"] = (float((abs_error[nonzero] / np.abs(xf[nonzero])).max())
                              if nonzero.any() else float("inf"))
    return details


def describe_values(values: dict) -> str:
    """One line, e.g. `1 of 1 values differ (int32, exact): expected 21, got 35; max abs
    difference 14, max rel difference 0.667`."""
    tolerance = values["tolerance"]
    rule = ("exact" if tolerance == "exact"
            else f"rtol {tolerance['rtol']:g}, atol {tolerance['atol']:g}")
    shown = "; ".join(
        (f"[{', '.join(map(str, item['index']))}] " if item["index"] else "")
        + f"expected {_show(item['expected'])}, got {_show(item['got'])}"
        for item in values["first"]
    )
    more = values["differing"] - len(values["first"])
    if more > 0:
        shown += f"; ... {more} more"
    sizes = ""
    if "max_abs" in values:
        sizes = (f"; max abs difference {values['max_abs']:.3g}, "
                 f"max rel difference {values['max_rel']:.3g}")
    return (f"{values['differing']} of {values['size']} values differ ({values['dtype']}, "
            f"{rule}): {shown}{sizes}")


def _equal(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    equal = x == y
    if x.dtype.kind in "fc":  # float64 under x64 etc. falls here only without a tolerance
        equal |= np.isnan(x) & np.isnan(y)
    return np.broadcast_to(equal, x.shape)


def _plain(value):
    """A numpy scalar as a JSON-ready Python value."""
    value = np.asarray(value)
    if value.dtype.kind == "c":
        return [float(value.real), float(value.imag)]
    if value.dtype.kind == "f":
        return float(value)
    if value.dtype.kind in "iub":
        return value.item()
    return str(value)


def _show(value) -> str:
    if isinstance(value, float):
        return f"{value:.7g}"
    if isinstance(value, list):
        return f"{value[0]:.7g}{value[1]:+.7g}j"
    return str(value)
