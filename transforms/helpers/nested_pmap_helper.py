"""`_nested_pmap_shard_map`, the helper a module with nested pmap carries (research R10).

Its code is transforms/templates/nested_pmap_shard_map.py (real, tested Python); this module
names it for the rule that asks for it.
"""

from __future__ import annotations

from transforms.helpers.helper_templates import helper_text
from transforms.target import TargetJax

NESTED_HELPER_NAME = "_nested_pmap_shard_map"


def nested_helper_source(target: TargetJax) -> str:
    """The nested helper's source text for `target`, ending with a newline."""
    return helper_text(NESTED_HELPER_NAME, target)
