"""Findings and summaries for people (text) and machines (json); exit codes in one place."""

from __future__ import annotations

import collections
import json
from typing import Iterable, TextIO

from migrator.runner import MIGRATED_SITE_CODES, FileResult

EXIT_CLEAN, EXIT_PENDING, EXIT_ERROR = 0, 1, 2
# An interrupted run (SIGINT, SIGTERM) exits 130: migrator.interrupts.EXIT_INTERRUPTED.
JSON_SCHEMA_VERSION = 2  # 2: notebook cells numbered from 1; files[].fully_global


def summary(results: list[FileResult]) -> dict:
    codes = collections.Counter(f.code for r in results for f in r.findings)
    return {
        "files": len(results),
        "changed": sum(r.changed for r in results),
        "migrated_sites": sum(codes.get(code, 0) for code in MIGRATED_SITE_CODES),
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


def summary_line(results: list[FileResult], verb: str, style: str = "faithful") -> str:
    """The run's totals; in the global style also how many migrated files came out fully
    global (no pmap-contract code: transforms/contract_names.py)."""
    s = summary(results)
    line = (
        f"pmap-migrate: {s['files']} files, {s['changed']} {verb}, "
        f"{s['migrated_sites']} pmap sites migrated, {s['needs_human']} need a human, "
        f"{s['errors']} errors"
    )
    if style == "global":
        migrated = [r for r in results if r.fully_global is not None]
        line += (f", {sum(r.fully_global for r in migrated)} of {len(migrated)} migrated files "
                 "fully global")
    return line


def write_json(results: list[FileResult], stream: TextIO) -> None:
    document = {
        "schema_version": JSON_SCHEMA_VERSION,
        "summary": summary(results),
        "files": [
            {"path": r.file.display, "changed": r.changed, "encoding": r.encoding,
             "fully_global": r.fully_global}
            for r in results
        ],
        "findings": [f.to_dict() for r in results for f in r.findings],
    }
    json.dump(document, stream, indent=2)
    stream.write("\n")
