"""Finding codes, loaded from rules.toml (the one place they are defined)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import tomllib
from importlib import resources

SEVERITIES = ("info", "warning", "error")
FIX_KINDS = ("safe", "review", "none")
# Codes no longer reported, kept in rules.toml so that configurations and suppressions naming
# them stay valid. (PM203's check lives on inside the pmap site rules.)
RETIRED = frozenset({"PM407"})


@dataclasses.dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: str
    fix: str
    what: str  # what the rule does, 1-3 sentences (ruff's "What it does")
    why: str  # why it matters, 1-3 sentences
    check: str  # what the user must check or do; every finding of the code carries it
    before: str = ""  # a complete program that reports this code (tests/test_rule_examples.py)
    after: str = ""  # what the migration makes of `before`, exactly (rules with a fix)
    # How `before` is run, where not through the pipeline: "file" (a file given to `apply`),
    # an arrangement of files the test builds (a symlink, a read-only file), or
    # "none: <why no source triggers it>".
    example: str = ""
    todo: str = ""  # warnings: the reason a `# TODO(pmap-migrate): CODE` comment gives
    # How to read the finding's short message: the long form of its parts, which the message
    # names in a few words (ruff's model: a short diagnostic, `explain` for the rest).
    message: str = ""


@functools.cache
def all_rules() -> dict[str, Rule]:
    """Every rule by code, in file order."""
    text = resources.files("transforms").joinpath("rules.toml").read_text(encoding="utf-8")
    rules = {}
    for code, fields in tomllib.loads(text).items():
        rule = Rule(code=code, **{k: v.strip("\n") for k, v in fields.items()})
        if rule.severity not in SEVERITIES or rule.fix not in FIX_KINDS:
            raise ValueError(f"rules.toml: {code} has a bad severity or fix kind")
        rules[code] = rule
    return rules


def rule(code: str) -> Rule:
    return all_rules()[code]


def _member_name(rule_name: str) -> str:
    return rule_name.upper().replace("-", "_")


# Every code as a name: `Code.PMAP_MIGRATED == "PM100"`, the member named by the rule's `name`
# in UPPER_SNAKE. Built from rules.toml at import, so code names a rule rather than spelling
# its number, and a code that is not in rules.toml cannot be written. A StrEnum: a finding's
# code serialises (text, JSON, SARIF) as the plain "PMnnn" string.
Code = enum.StrEnum("Code", [(_member_name(r.name), r.code) for r in all_rules().values()])
Code.__module__ = __name__
Code.__doc__ = "A finding code (transforms/rules.toml): the member's value is its \"PMnnn\"."
