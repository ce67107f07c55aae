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


@dataclasses.dataclass
class Difference:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def compare_outputs(original: dict, migrated: dict) -> list[Difference]:
    """Each argument: {"treedef": str, "leaves": [...], "arrays": {key: ndarray}}."""
    if original["treedef"] != migrated["treedef"]:
        return [Difference("<root>", f"structure {original['treedef']} != {migrated['treedef']}")]
    differences = []
    for a, b in zip(original["leaves"], migrated["leaves"]):
        path = a["path"]
        if "key" not in a or "key" not in b:
            kinds = f"{a.get('type', a.get('dtype'))} / {b.get('type', b.get('dtype'))}"
            differences.append(Difference(path, f"not an array ({kinds}); cannot be compared"))
            continue
        x, y = original["arrays"][a["key"]], migrated["arrays"][b["key"]]
        if x.shape != y.shape or x.dtype != y.dtype:
            differences.append(
                Difference(path, f"{x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}")
            )
            continue
        difference = _value_difference(x, y)
        if difference:
            differences.append(Difference(path, difference))
    return differences


def _value_difference(x: np.ndarray, y: np.ndarray) -> str | None:
    tolerance = TOLERANCES.get(str(x.dtype))
    if tolerance is None:
        equal = np.array_equal(x, y)
        return None if equal else f"values differ at {int(np.sum(x != y))} of {x.size} positions"
    rtol, atol = tolerance
    xf, yf = x.astype(np.float64 if "complex" not in str(x.dtype) else np.complex128), y.astype(
        np.float64 if "complex" not in str(x.dtype) else np.complex128
    )
    close = np.isclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    abs_error = np.abs(xf - yf)
    abs_error = np.where(np.isnan(abs_error), np.inf, abs_error)
    rel_error = abs_error / np.maximum(np.abs(xf), np.finfo(np.float64).tiny)
    return (
        f"{int((~close).sum())} of {x.size} values differ; "
        f"max abs error {abs_error.max():.3g}, max rel error {rel_error.max():.3g}"
    )
