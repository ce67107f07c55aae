"""`_pmap_style_shard_map`, the helper every migrated module with a literal pmap site carries.

Its code is transforms/templates/pmap_style_shard_map.py (real, tested Python); this module
names it for the rules that ask for it.
"""

from __future__ import annotations

from transforms.helpers.helper_templates import MARKER as HELPER_MARKER
from transforms.helpers.helper_templates import helper_text
from transforms.target import TargetJax

HELPER_NAME = "_pmap_style_shard_map"


def helper_source(target: TargetJax) -> str:
    """The helper's source text for `target`, ending with a newline."""
    return helper_text(HELPER_NAME, target)


__all__ = ["HELPER_MARKER", "HELPER_NAME", "helper_source"]
