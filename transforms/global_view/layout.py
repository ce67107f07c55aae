"""The layout map: how the migration changed the layout of a function's outputs.

For each function the global style changed whose return value left pmap's layout (an entry
point such as `run()` returning the stacked parameters), one `OutputLayout` per key-path prefix:
- "replicated": the original had a device axis at `axis` holding equal rows; it is dropped;
- "merged": the original had the device axis at `axis` and the per-device axis after it; the
  two are one axis now.
Leaves under no prefix keep their layout. The map is plain data (JSON-able) so the check, and a
later plain-jit style, can read it without this module's analysis.
"""

from __future__ import annotations

import dataclasses

REPLICATED, MERGED = "replicated", "merged"


@dataclasses.dataclass(frozen=True)
class OutputLayout:
    path: str  # key-path prefix as jax.tree_util prints it: "['w']", "[0]['b']"; "" for all
    kind: str  # REPLICATED | MERGED
    axis: int = 0  # where the device axis is in the original's leaves

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FunctionLayout:
    function: str
    outputs: tuple[OutputLayout, ...]

    def to_dict(self) -> dict:
        return {"function": self.function, "outputs": [o.to_dict() for o in self.outputs]}


def layout_for(path: str, outputs) -> OutputLayout | None:
    """The layout that applies to the leaf at key path `path` (the longest prefix wins)."""
    best = None
    for output in outputs:
        if path.startswith(output.path) and (best is None or len(output.path) > len(best.path)):
            best = output
    return best
