"""Drop-ins for `jax.device_put_replicated` / `jax.device_put_sharded` (removed in JAX 0.10),
written into the user's module by `transforms.faithful.placement`.

Their code is transforms/templates/device_put_replicated.py and device_put_sharded.py (real,
tested Python, one text for every target).
"""

from __future__ import annotations

from transforms.helpers.helper_templates import MARKER_LINE as HELPER_MARKER
from transforms.helpers.helper_templates import helper_text

REPLICATED = "_device_put_replicated"
SHARDED = "_device_put_sharded"

SOURCES = {name: helper_text(name) for name in (REPLICATED, SHARDED)}

__all__ = ["HELPER_MARKER", "REPLICATED", "SHARDED", "SOURCES"]
