"""Layout variants of a module: the same program written the ways people write it.

Real code breaks lines inside brackets, puts comments there, drops the space before a bracket
(`if(x)`, `not(x)`) and adds redundant parentheses. Each variant changes ONE such thing in the
source, and is kept only when Python reads it as the same program (same `ast` dump). The
migration of a variant must then parse, be stable on a second run, and be the migration of the
original program, up to layout: a rule that edits expressions must keep libcst's whitespace
nodes whatever their kind.
"""

from __future__ import annotations

import ast
import dataclasses
import warnings
from collections.abc import Iterator

import libcst as cst

COMMENTED_BREAK = cst.ParenthesizedWhitespace(
    first_line=cst.TrailingWhitespace(
        whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# note")
    ),
    indent=True,
    last_line=cst.SimpleWhitespace("        "),
)
BREAK = cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace("        "))
KINDS = ("commented_break", "no_space", "parens")  # a bare line break adds nothing a commented one misses


@dataclasses.dataclass(frozen=True)
class Variant:
    kind: str
    index: int  # which whitespace node / expression of the module was changed
    source: str


class _ChangeOne(cst.CSTTransformer):
    """Change the `index`-th whitespace node (or expression, for "parens") and no other."""

    def __init__(self, kind: str, index: int):
        super().__init__()
        self.kind, self.index, self.seen = kind, index, 0

    def _is_target(self) -> bool:
        self.seen += 1
        return self.seen - 1 == self.index

    def leave_SimpleWhitespace(self, original_node, updated_node):
        if self.kind == "parens" or not self._is_target():
            return updated_node
        if self.kind == "no_space":
            return cst.SimpleWhitespace("") if updated_node.value == " " else updated_node
        return COMMENTED_BREAK if self.kind == "commented_break" else BREAK

    def on_leave(self, original_node, updated_node):
        updated_node = super().on_leave(original_node, updated_node)
        if (
            self.kind == "parens"
            and isinstance(updated_node, cst.BaseExpression)
            and hasattr(updated_node, "lpar")
            and self._is_target()
        ):
            return updated_node.with_changes(
                lpar=[cst.LeftParen(), *updated_node.lpar],
                rpar=[*updated_node.rpar, cst.RightParen()],
            )
        return updated_node


def variants(source: str, kinds: tuple[str, ...] = KINDS) -> Iterator[Variant]:
    """Every one-change variant of `source` that Python reads as the same program."""
    module = cst.parse_module(source)
    reference = ast.dump(ast.parse(source))
    for kind in kinds:
        index = 0
        while True:
            changer = _ChangeOne(kind, index)
            try:
                text = module.visit(changer).code
            except cst.CSTValidationError:  # libcst itself refuses this spot
                text = source
            if changer.seen <= index:
                break
            index += 1
            if text == source:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", SyntaxWarning)  # `1if x` and the like
                    same = ast.dump(ast.parse(text)) == reference
            except SyntaxError:
                continue
            if same:
                yield Variant(kind, index - 1, text)


def migrated_program(source: bytes) -> tuple[str, list[str]]:
    """What the migration of `source` means: its ast dump and its finding codes, in order."""
    from transforms.pipeline import migrate_source

    result = migrate_source(source)
    return ast.dump(ast.parse(result.source)), sorted(f.code for f in result.findings)


def layout_problem(variant: Variant, expected: tuple[str, list[str]]) -> str | None:
    """Why the migration of `variant` is wrong, or None: it must not raise, must parse, must
    not change on a second run and must be the same program as the original's migration."""
    from transforms.pipeline import migrate_source

    try:
        result = migrate_source(variant.source.encode())
    except Exception as error:  # noqa: BLE001 - the error is the finding
        return f"raised {type(error).__name__}: {error}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            program = ast.dump(ast.parse(result.source))
    except SyntaxError as error:
        return f"output does not parse: {error.msg} (line {error.lineno})"
    if migrate_source(result.source).source != result.source:
        return "a second run changes the output"
    if program != expected[0]:
        return "migrated to a different program than the original layout"
    codes = sorted(f.code for f in result.findings)
    if codes != expected[1]:
        return f"findings {codes} instead of {expected[1]}"
    return None


def main() -> None:
    """`python tests/layout_variants.py [FIXTURE_PREFIX ...]`: every variant of every fixture."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    fixtures = Path(__file__).resolve().parent / "fixtures"
    prefixes = tuple(sys.argv[1:]) or ("",)
    checked = failed = 0
    for case in sorted(p for p in fixtures.iterdir() if (p / "before.py").exists()):
        if not case.name.startswith(prefixes):
            continue
        before = (case / "before.py").read_bytes()
        try:
            text = before.decode("utf-8")
        except UnicodeDecodeError:
            continue
        expected = migrated_program(before)
        here = 0
        for variant in variants(text):
            here += 1
            problem = layout_problem(variant, expected)
            if problem:
                failed += 1
                print(f"{case.name} {variant.kind}#{variant.index}: {problem}", flush=True)
        checked += here
        print(f"{case.name}: {here} variants", flush=True)
    print(f"{checked} variants, {failed} wrong")


if __name__ == "__main__":
    main()
