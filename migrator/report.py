"""Findings and summaries for people (text) and machines (json); exit codes in one place."""

from __future__ import annotations

import collections
import json
from typing import Iterable, TextIO

from migrator.runner import FileResult
from transforms.codes import Code

EXIT_CLEAN, EXIT_PENDING, EXIT_ERROR = 0, 1, 2
# An interrupted run (SIGINT, SIGTERM) exits 130: migrator.interrupts.EXIT_INTERRUPTED.
JSON_SCHEMA_VERSION = 1


def summary(results: list[FileResult]) -> dict:
    codes = collections.Counter(f.code for r in results for f in r.findings)
    return {
        "files": len(results),
        "changed": sum(r.changed for r in results),
        # PM100: a site rewritten in the faithful style; PM600: one rewritten in the global
        # style; PM612: one given pmap's calling contract without the helper (global style).
        "migrated_sites": sum(codes.get(code, 0) for code in (
            Code.PMAP_MIGRATED, Code.GLOBAL_VIEW_SITE, Code.GLOBAL_VIEW_CONTRACT)),
        "needs_human": sum(f.needs_human for r in results for f in r.findings),
        "errors": sum(f.severity == "error" for r in results for f in r.findings),
        "by_code": dict(sorted(codes.items())),
    }


def exit_code(results: list[FileResult], *, pending_counts: bool) -> int:
    """2 on any tool error; 1 when a human is needed (or, for diff/scan, changes are pending):
    a site to look at, or a read-only file `apply` left alone (PM008, a warning)."""
    totals = summary(results)
    if totals["errors"]:
        return EXIT_ERROR
    if totals["needs_human"] or (pending_counts and totals["changed"]):
        return EXIT_PENDING
    return EXIT_CLEAN


def write_text(results: Iterable[FileResult], stream: TextIO) -> None:
    for result in results:
        for finding in result.findings:
            stream.write(finding.to_text() + "\n")


def summary_line(results: list[FileResult], verb: str) -> str:
    s = summary(results)
    return (
        f"pmap-migrate: {s['files']} files, {s['changed']} {verb}, "
        f"{s['migrated_sites']} pmap sites migrated, {s['needs_human']} need a human, "
        f"{s['errors']} errors"
    )


def write_json(results: list[FileResult], stream: TextIO) -> None:
    document = {
        "schema_version": JSON_SCHEMA_VERSION,
        "summary": summary(results),
        "files": [
            {"path": r.file.display, "changed": r.changed, "encoding": r.encoding}
            for r in results
        ],
        "findings": [f.to_dict() for r in results for f in r.findings],
    }
    json.dump(document, stream, indent=2)
    stream.write("\n")
