"""`_pmap_compat`, the drop-in a module gets where pmap's arguments are only known at run time.

Its code is transforms/templates/pmap_compat.py (real, tested Python). Literal sites do not
use it: their readable translation stays at the site.
"""

from __future__ import annotations

from transforms.helpers.helper_templates import helper_text

COMPAT_HELPER_NAME = "_pmap_compat"


def compat_helper_source() -> str:
    """The drop-in's source text (the same for every target), ending with a newline."""
    return helper_text(COMPAT_HELPER_NAME)
