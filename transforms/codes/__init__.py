"""Finding codes: the rule table (from transforms/rules.toml), the Code enum built from it, and
the Finding record."""

from transforms.codes.rules import Code

__all__ = ["Code"]
