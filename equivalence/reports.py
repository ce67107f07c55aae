"""Check reports: a rich terminal table, JSON (schema in docs/CHECK_REPORT.md), JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.table import Table

from equivalence.check import DIFFERENT, EQUIVALENT, ERROR, STALLED, EntryReport, summary

SCHEMA_VERSION = 2  # 2: the "stalled" verdict, summary count and per-side "stall"
STYLE = {EQUIVALENT: "green", DIFFERENT: "red", STALLED: "magenta", ERROR: "yellow"}
STALL_NOTE = "a harness stall, not a difference in the program"


def print_terminal(reports: list[EntryReport], console: Console) -> None:
    table = Table(title="pmap-migrate check", show_lines=False)
    for column in ("entry", "devices", "verdict", "outputs", "collectives", "donation", "sharding", "seconds"):
        table.add_column(column, justify="right" if column in ("devices", "seconds") else "left")
    for r in reports:
        cells = [r.sections[s].verdict if s in r.sections else "-" for s in ("outputs", "collectives", "donation", "sharding")]
        table.add_row(r.entry, str(r.devices), f"[{STYLE[r.verdict]}]{r.verdict}[/]", *cells, f"{r.seconds:.1f}")
    console.print(table)
    for r in reports:
        notes = [n for s in r.sections.values() for n in s.notes]
        if r.differences or r.stalls or notes:
            console.print(f"[bold]{r.entry}[/] at {r.devices} devices:")
            for line in r.stalls:
                console.print(f"  [magenta]stall[/] {line} ({STALL_NOTE})", markup=True, highlight=False)
            for line in r.differences:
                console.print(f"  [red]difference[/] {line}", markup=True, highlight=False)
            for line in notes:
                console.print(f"  [dim]note[/] {line}", markup=True, highlight=False)
    counts = summary(reports)
    console.print(
        f"{counts['checks']} checks: {counts[EQUIVALENT]} equivalent, "
        f"{counts[DIFFERENT]} different, {counts[STALLED]} stalled in the harness, "
        f"{counts[ERROR]} could not be checked"
    )


def write_json(reports: list[EntryReport], path: Path) -> None:
    document = {
        "schema_version": SCHEMA_VERSION,
        "summary": summary(reports),
        "results": [r.to_dict() for r in reports],
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def write_junit(reports: list[EntryReport], path: Path) -> None:
    counts = summary(reports)
    suite = ET.Element(
        "testsuite", name="pmap-migrate check", tests=str(counts["checks"]),
        failures=str(counts[DIFFERENT]), errors=str(counts[ERROR] + counts[STALLED]),
        time=f"{sum(r.seconds for r in reports):.3f}",
    )
    for r in reports:
        case = ET.SubElement(
            suite, "testcase", classname="pmap-migrate.equivalence",
            name=f"{r.entry}[{r.devices} devices]", time=f"{r.seconds:.3f}",
        )
        if r.verdict == STALLED:
            # An error, not a failure: the check could not be made, the program is not at fault.
            element = ET.SubElement(case, "error", type="harness-stall",
                                    message=f"{STALL_NOTE}: {r.stalls[0]}"[:500])
            element.text = "\n".join(r.stalls + r.differences)
        elif r.verdict != EQUIVALENT:
            tag = "error" if r.verdict == ERROR else "failure"
            element = ET.SubElement(case, tag, message=(r.differences or [r.verdict])[0][:500])
            element.text = "\n".join(r.differences)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
