"""The generated helpers' text, read from the real source files in transforms/templates/.

A helper named `_name` lives in `templates/name.py`. Its text is the file from the marker
comment to the end, with each `# pmap-migrate: if target >= X` block resolved for the target
JAX and each `# pmap-migrate: if FEATURE [and FEATURE ...]` block for the features the module's
sites use (see templates/__init__.py and transforms/helpers/helper_features.py). Files are read,
never imported: the transform path must not import JAX, and the text is what the user's module
gets.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from transforms.target import DEFAULT_TARGET, TargetJax

# Marks the start of every emitted helper: tells a reader where the code came from, and a second
# run that the function is ours.
MARKER = "# pmap-migrate: helper"
MARKER_LINE = f"{MARKER} (plain JAX, safe to keep; see the pmap-migrate rules reference)"

# Every feature a template block can name; a helper written without a feature list has them all
# (the variant a helper module holds, and the templates' own first branches).
FEATURES = frozenset({"static", "donate", "devices", "committed", "cached", "multiprocess"})

_BLOCK = re.compile(
    r"^[ \t]*# pmap-migrate: if "
    r"(?:target >= (?P<version>\S+)|(?P<features>(?:not )?[a-z]+(?: and (?:not )?[a-z]+)*))\n"
    r"(?P<then>.*?)"
    r"(?:^[ \t]*# pmap-migrate: else\n(?P<otherwise>.*?))?"
    r"^[ \t]*# pmap-migrate: end\n",
    re.MULTILINE | re.DOTALL,
)


@functools.cache
def template_source(name: str) -> str:
    """The whole template file `templates/<name without its underscore>.py` (tests and tools
    read it; nothing runs it)."""
    stem = name.lstrip("_")
    return resources.files("transforms").joinpath("templates", f"{stem}.py").read_text("utf-8")


@functools.cache
def helper_text(
    name: str, target: TargetJax = DEFAULT_TARGET, features: frozenset[str] = FEATURES
) -> str:
    """Helper `name`'s source for `target`, from its marker line, ending with a newline, with
    the blocks of `features` (by default every feature: the full helper)."""
    unknown = set(features) - FEATURES
    if unknown:
        raise ValueError(f"unknown helper features {sorted(unknown)}")
    text = template_source(name)
    start = text.find(MARKER_LINE + "\n")
    if start < 0 or (start > 0 and text[start - 1] != "\n"):
        raise ValueError(f"templates/{name.lstrip('_')}.py has no line {MARKER_LINE!r}")
    text = text[start:]

    return resolve_blocks(text, target, features, f"templates/{name.lstrip('_')}.py")


def resolve_blocks(text: str, target: TargetJax, features: frozenset[str], where: str) -> str:
    """`text` with each `# pmap-migrate: if ...` block resolved for `target` and `features`
    (`where` names the text in errors)."""

    def resolve(block: re.Match[str]) -> str:
        if block["features"]:
            terms = [(term.startswith("not "), term.removeprefix("not "))
                     for term in block["features"].split(" and ")]
            if {feature for _, feature in terms} - FEATURES:
                raise ValueError(f"{where}: {block['features']}: unknown")
            chosen = all((feature in features) != negated for negated, feature in terms)
        else:
            chosen = target >= TargetJax.parse(block["version"])
        return block["then"] if chosen else block["otherwise"] or ""

    text = _BLOCK.sub(resolve, text)
    if "# pmap-migrate: if" in text or "# pmap-migrate: else" in text:
        raise ValueError(f"{where}: an unclosed block")
    return text
