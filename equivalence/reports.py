"""Check reports: a rich terminal table, JSON (schema in docs/CHECK_REPORT.md), JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from equivalence.check import (
    DIFFERENT, EQUIVALENT, ERROR, NONDETERMINISTIC, STALLED, EntryReport, guard_cost, summary,
)

# 2: the "stalled" verdict, summary count and per-side "stall". 3: the "nondeterministic"
# verdict and count, per-side "runs" / "repeat_seconds", "nondeterminism", "attribution",
# outputs' "values", the top-level "guard".
SCHEMA_VERSION = 3
STYLE = {EQUIVALENT: "green", DIFFERENT: "red", NONDETERMINISTIC: "bright_red",
         STALLED: "magenta", ERROR: "yellow"}
STALL_NOTE = "a harness stall, not a difference in the program"


def print_terminal(reports: list[EntryReport], console: Console) -> None:
    table = Table(title="pmap-migrate check", show_lines=False)
    per_process = any(r.processes > 1 for r in reports)
    columns = ("entry", "devices", *(("process",) if per_process else ()), "verdict", "outputs",
               "collectives", "donation", "sharding", "seconds")
    for column in columns:
        table.add_column(column, justify="right" if column in ("devices", "seconds") else "left")
    for r in reports:
        cells = [r.sections[s].verdict if s in r.sections else "-" for s in ("outputs", "collectives", "donation", "sharding")]
        process = (f"{r.process} of {r.processes}",) if per_process else ()
        table.add_row(r.entry, str(r.devices), *process, f"[{STYLE[r.verdict]}]{r.verdict}[/]", *cells, f"{r.seconds:.1f}")
    console.print(table)
    for r in reports:
        notes = [n for s in r.sections.values() for n in s.notes]
        if r.differences or r.stalls or notes or r.nondeterministic:
            console.print(f"[bold]{r.label}[/]:", highlight=False)
            for line in r.stalls:
                console.print(f"  [magenta]stall[/] {line} ({STALL_NOTE})", markup=True, highlight=False)
            for line in r.nondeterministic:
                console.print(f"  [bright_red]nondeterministic[/] {escape(line)}", markup=True,
                              highlight=False)
            # Beside a side that disagreed with itself, a difference of the first runs is no
            # verdict: it is shown for what it is.
            # An entry that could not be checked shows why, not a difference.
            label = {NONDETERMINISTIC: "first runs", ERROR: "[yellow]error[/]"}.get(
                r.verdict, "[red]difference[/]")
            for line in r.differences:
                console.print(f"  {label} {escape(line)}", markup=True, highlight=False)
            for line in attribution_lines(r):
                label = "   " if line.startswith("  ") else "[cyan]who[/]"  # a leaf's own line
                console.print(f"  {label} {escape(line)}", markup=True, highlight=False)
            for line in notes:
                console.print(f"  [dim]note[/] {line}", markup=True, highlight=False)
    counts = summary(reports)
    console.print(
        f"{counts['checks']} checks: {counts[EQUIVALENT]} equivalent, "
        f"{counts[DIFFERENT]} different, {counts[NONDETERMINISTIC]} nondeterministic, "
        f"{counts[STALLED]} stalled in the harness, {counts[ERROR]} could not be checked",
        highlight=False,
    )
    console.print(guard_line(reports), highlight=False)


def guard_line(reports: list[EntryReport]) -> str:
    """What the determinism guard did and cost."""
    cost = guard_cost(reports)
    if cost["runs_per_side"] < 2:
        return "determinism guard off (--repeat 1): each side ran once"
    return (f"determinism guard: each side ran {cost['runs_per_side']} times; the repeats took "
            f"{cost['repeat_seconds']:.1f} s of worker time, the first runs "
            f"{cost['first_run_seconds']:.1f} s")


def attribution_lines(r: EntryReport) -> list[str]:
    """`the migration changed it: ...`, then one line per leaf when the leaves disagree."""
    if not r.attribution:
        return []
    a = r.attribution
    lines = [f"{a['message']} ({a['why']})"]
    leaves = a.get("leaves", [])
    if len({leaf["verdict"] for leaf in leaves}) > 1:
        lines += [f"  {leaf['path']}: {leaf['message']}" for leaf in leaves]
    for leaf in leaves:
        if leaf.get("upgrade"):
            lines.append(f"  upgrade alone (original, old JAX -> new JAX): {leaf['upgrade']}")
    return lines


def write_json(reports: list[EntryReport], path: Path) -> None:
    document = {
        "schema_version": SCHEMA_VERSION,
        "summary": summary(reports),
        "guard": guard_cost(reports),
        "results": [r.to_dict() for r in reports],
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def write_junit(reports: list[EntryReport], path: Path) -> None:
    counts = summary(reports)
    suite = ET.Element(
        "testsuite", name="pmap-migrate check", tests=str(counts["checks"]),
        failures=str(counts[DIFFERENT] + counts[NONDETERMINISTIC]),
        errors=str(counts[ERROR] + counts[STALLED]),
        time=f"{sum(r.seconds for r in reports):.3f}",
    )
    for r in reports:
        case = ET.SubElement(
            suite, "testcase", classname="pmap-migrate.equivalence",
            name=r.label, time=f"{r.seconds:.3f}",
        )
        if r.verdict == STALLED:
            # An error, not a failure: the check could not be made, the program is not at fault.
            element = ET.SubElement(case, "error", type="harness-stall",
                                    message=f"{STALL_NOTE}: {r.stalls[0]}"[:500])
            element.text = "\n".join(r.stalls + r.differences)
        elif r.verdict == NONDETERMINISTIC:
            # A failure (not a pass), of its own type: a side disagreed with itself.
            element = ET.SubElement(case, "failure", type="nondeterministic",
                                    message=r.nondeterministic[0][:500])
            element.text = "\n".join(r.nondeterministic + r.differences)
        elif r.verdict != EQUIVALENT:
            tag = "error" if r.verdict == ERROR else "failure"
            element = ET.SubElement(case, tag, message=(r.differences or [r.verdict])[0][:500])
            element.text = "\n".join(r.differences + attribution_lines(r))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
