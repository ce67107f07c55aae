"""`--help` as people read it: typer 0.29's rich help, mended where it shows its internals.

typer prints a type after every option, flags included (`--color <bool>`, `--help <bool>`),
a type after the paths argument (`<list[Path]>`), and braces around a required argument in
the usage line (`{paths}...`). Commands built with `Command` show flags bare, arguments by
their metavar (`PATH`), and a usage line in click's usual form (`PATH...`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

if TYPE_CHECKING:  # typer vendors click (typer._click); it is not installed on its own
    import click


class _Argument(TyperArgument):
    """An argument shown by its metavar alone: no type in the help, no braces in the usage."""

    def display_type_rich(self, ctx: click.Context) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.metavar or self.name.upper()
        if self.nargs != 1:
            name += "..."
        return name if self.required else f"[{name}]"


class _Flag(TyperOption):
    """An on/off option: nothing to type after it, so no type shown."""

    def display_type_rich(self, ctx: click.Context) -> str | None:
        return None


def _mended(param: click.Parameter) -> click.Parameter:
    if type(param) is TyperArgument:
        param.__class__ = _Argument
    elif type(param) is TyperOption and (param.is_flag or param.count):
        param.__class__ = _Flag
    return param


class Command(TyperCommand):
    """A typer command whose help shows flags, arguments and usage as click does."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return [_mended(param) for param in super().get_params(ctx)]

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        self.get_params(ctx)  # the arguments mended before they name themselves
        return super().collect_usage_pieces(ctx)


class Group(TyperGroup):
    """The top level (`pmap-migrate --help`), mended as `Command` is."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return [_mended(param) for param in super().get_params(ctx)]
