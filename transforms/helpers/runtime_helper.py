"""`_pmap_style_shard_map`, the helper every migrated module with a literal pmap site carries.

Its code is transforms/templates/pmap_style_shard_map.py (real, tested Python); this module
names it for the rules that ask for it.
"""

from __future__ import annotations

from transforms.helpers.helper_templates import MARKER as HELPER_MARKER
from transforms.helpers.helper_templates import FEATURES, helper_text
from transforms.target import TargetJax

HELPER_NAME = "_pmap_style_shard_map"


def helper_source(target: TargetJax, features: frozenset[str] = FEATURES) -> str:
    """The helper's source text for `target` with `features` (by default all: the full
    helper; see transforms/helpers/helper_features.py), ending with a newline."""
    return helper_text(HELPER_NAME, target, frozenset(features))


__all__ = ["HELPER_MARKER", "HELPER_NAME", "helper_source"]
