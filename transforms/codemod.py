"""pmap-migrate as a libcst codemod command, for teams that already drive codemods with libcst.

With a `.libcst.codemod.yaml` (``python -m libcst.tool initialize .``) that lists this
package, ``modules: ['transforms', 'libcst.codemod.commands']``, and the repository
importable (installed, or on ``PYTHONPATH``)::

    python -m libcst.tool codemod codemod.PmapMigrateCommand --no-format [--target-jax 0.10] [--style global] PATH...

(The command name first: libcst finds it with an argparse pass that does not know the other
options, so ``-j 2 codemod.PmapMigrateCommand`` would take ``2`` for the command.)

libcst looks the command up as ``<module>.codemod.PmapMigrateCommand`` for each listed
module; ``-x transforms.codemod.PmapMigrateCommand`` works without the yaml entry.
``--no-format`` gives exactly the output of ``pmap-migrate apply``: without it libcst pipes
every changed file through the yaml's ``formatter`` (black by default; an empty formatter list
is an error unless ``--no-format`` is given).

The command composes the same transforms as `transforms.pipeline.migrate_source`, in the same
order and on the codemod's own context, so the imports they ask for are added and removed by
libcst's `CodemodCommand` machinery after `transform_module_impl` returns. With ``--style
global`` (see the README's Styles) the module goes through `migrate_source` itself: the global
pass works on the module's text, so its imports are already in the result. Either way the
output is byte for byte that of `migrate_source` with the same target and style. Every finding
is reported with `self.warn`, in the same ``path:line:col: CODE severity message`` form the
CLI prints. The command reads no `[tool.pmap-migrate]` configuration: its options are its
arguments.
"""

from __future__ import annotations

import argparse

import libcst as cst
from libcst.codemod import CodemodCommand, CodemodContext

from transforms.codes.findings import Finding
from transforms.line_wrap import wrap_long_lines
from transforms.pipeline import might_need_migration, migrate_source, run_rules
from transforms.suppressions import Suppressions
from transforms.target import NEWEST, TargetJax
from transforms.todo_comments import TODO_WORD, wants_todo


STYLES = ("faithful", "global")  # as migrator/config.py's, which this layer does not import


class PmapMigrateCommand(CodemodCommand):
    DESCRIPTION: str = (
        "Migrate jax.pmap sites to jax.jit + jax.shard_map (pmap-migrate), "
        "and rename or report removed JAX APIs."
    )

    @staticmethod
    def add_args(arg_parser: argparse.ArgumentParser) -> None:
        arg_parser.add_argument(
            "--target-jax",
            dest="target_jax",
            metavar="VERSION",
            type=_target_jax,
            default=NEWEST,
            help=f"JAX version the generated code is written for (default {NEWEST}).",
        )
        arg_parser.add_argument(
            "--style",
            dest="style",
            choices=STYLES,
            default="faithful",
            help="faithful (pmap's calling contract kept; default) or global (no device axis "
            "where the whole module is recognised).",
        )

    def __init__(
        self, context: CodemodContext, target_jax: str | TargetJax = NEWEST, style: str = "faithful"
    ) -> None:
        super().__init__(context)
        self.target = target_jax if isinstance(target_jax, TargetJax) else TargetJax.parse(target_jax)
        if style not in STYLES:
            raise ValueError(f"style must be one of {', '.join(STYLES)}, not {style!r}")
        self.style = style
        self.findings: list[Finding] = []

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """The migration, with the imports libcst's machinery adds; then its long lines
        wrapped, as `migrate_source` wraps them."""
        original = tree.bytes
        result = super().transform_module(tree)
        wrapped = wrap_long_lines(result.bytes, original)
        return result if wrapped == result.bytes else cst.parse_module(wrapped)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        source = tree.bytes
        self.findings = []
        if not might_need_migration(source):
            return tree
        if self.style == "global":
            migration = migrate_source(source, self.target, style="global")
            tree, findings = cst.parse_module(migration.source), migration.findings
        else:
            # Imports asked for by the rules are added/removed by CodemodCommand.transform_module.
            migrated, findings = run_rules(tree, self.context, self.target,
                                           Suppressions.from_source(source))
            if TODO_WORD in source or migrated.code != tree.code and any(map(wants_todo, findings)):
                # TODO comments (transforms/todo_comments.py) are written on the module's text,
                # as migrate_source writes them (its imports are in its result already).
                migration = migrate_source(source, self.target)
                migrated, findings = cst.parse_module(migration.source), migration.findings
            tree = migrated
        path = self.context.filename or "<stdin>"
        self.findings = [f.at(path) for f in findings]
        for finding in self.findings:
            self.warn(finding.to_text())
        return tree


def _target_jax(text: str) -> TargetJax:
    try:
        return TargetJax.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
