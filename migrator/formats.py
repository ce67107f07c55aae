"""Machine-readable reports: SARIF 2.1.0, GitHub Actions workflow commands, JUnit XML; and
`--statistics`, the count of findings per code (`write_statistics`).

Every format is a writer: `add(result)` is called once per file, in discovery order, with the
full result, and `finish(stream)` writes the whole document. A writer keeps only what its
document needs (findings, and for SARIF the changed hunks), never whole file contents, so
memory stays small however large the tree is.

SARIF fixes
-----------
For a changed file the original and migrated texts (decoded with the file's encoding; a BOM
is not part of the text) are compared line by line with difflib. Lines end at ``\\n``,
``\\r\\n`` or ``\\r``, as Python's tokenizer (and so the finding positions) counts them. Each
differing hunk becomes one SARIF ``replacement`` (a block of n lines replaced by n lines is
split into one hunk per line, so that each rewritten line can go to its own site):

- ``deletedRegion`` is given as ``charOffset`` / ``charLength``: a zero-based offset into the
  ORIGINAL text, and a length, both counted in Unicode code points (the run says
  ``columnKind: unicodeCodePoints``). A hunk always covers whole lines, line endings
  included; a pure insertion has ``charLength`` 0. Offsets rather than line/column because a
  hunk may delete the last line of a file, or insert after it, which a line/column region
  cannot say without pointing past the end of the file.
- ``insertedContent.text`` is the migrated text of the hunk, line endings included.

Each hunk is given to exactly one result of its file: to the first rewritten site (a finding
whose rule has a fix kind other than "none": PM100, PM304) whose line lies in the hunk's
original lines; a hunk that contains no site line (the inserted helper function, added
imports) goes to the file's first PM100 result (or its first rewritten site, or its first
result). Hunks never overlap and all offsets refer to the original text, so applying every
replacement of a file, from the highest offset down, to the original text gives exactly the
migrated text.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import io
import json
import re
import urllib.parse
import xml.etree.ElementTree as ET
from typing import Protocol, TextIO

from migrator.runner import FileResult
from transforms.codes import Code
from transforms.codes.findings import Finding
from transforms.codes.rules import all_rules, rule

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
TOOL_NAME = "pmap-migrate"
SARIF_LEVELS = {"info": "note", "warning": "warning", "error": "error"}
GITHUB_COMMANDS = {"info": "notice", "warning": "warning", "error": "error"}
SITE_CODE = Code.PMAP_MIGRATED


class Writer(Protocol):
    def add(self, result: FileResult) -> None: ...

    def finish(self, stream: TextIO) -> None: ...


def _path(finding: Finding, result: FileResult) -> str:
    return (finding.path or result.file.display).replace("\\", "/")


# -- SARIF ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Hunk:
    """One changed run of whole lines: original lines first_line..last_line (1-based,
    inclusive; last_line = first_line - 1 for a pure insertion) are replaced by `text`."""

    first_line: int
    last_line: int
    offset: int  # code points into the original text
    length: int
    text: str

    def contains(self, line: int) -> bool:
        return self.first_line <= line <= self.last_line

    def to_sarif(self) -> dict:
        return {
            "deletedRegion": {"charOffset": self.offset, "charLength": self.length},
            "insertedContent": {"text": self.text},
        }


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split at \\n, \\r\\n and \\r only (not at \\f, \\u2028...)."""
    return io.StringIO(text, newline="").readlines()


def changed_hunks(original: str, migrated: str) -> list[Hunk]:
    old, new = split_lines(original), split_lines(migrated)
    starts = [0]
    for line in old:
        starts.append(starts[-1] + len(line))
    hunks = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            # n lines became n lines: one hunk per line, so each site gets its own line.
            hunks.extend(
                Hunk(i + 1, i + 1, starts[i], len(old[i]), new[j])
                for i, j in zip(range(i1, i2), range(j1, j2))
                if old[i] != new[j]
            )
        else:
            hunks.append(Hunk(i1 + 1, i2, starts[i1], starts[i2] - starts[i1], "".join(new[j1:j2])))
    return hunks


def _assign_hunks(findings: list[Finding], hunks: list[Hunk]) -> dict[int, list[Hunk]]:
    """Index of a finding in `findings` -> the hunks its result carries as fixes."""
    if not hunks or not findings:
        return {}
    sites = [i for i, f in enumerate(findings) if rule(f.code).fix != "none"]
    pm100 = [i for i in sites if findings[i].code == SITE_CODE]
    fallback = (pm100 or sites or [0])[0]
    assigned: dict[int, list[Hunk]] = {}
    for hunk in hunks:
        owner = next((i for i in sites if hunk.contains(findings[i].line)), fallback)
        assigned.setdefault(owner, []).append(hunk)
    return assigned


def artifact_location(path: str) -> dict:
    """A relative display path is a URI reference under %SRCROOT%; an absolute one a file: URI."""
    path = path.replace("\\", "/")
    drive = re.match(r"[A-Za-z]:/", path)
    if path.startswith("/") or drive:
        prefix = "file:///" if drive else "file://"
        return {"uri": prefix + urllib.parse.quote(path, safe="/:" if drive else "/")}
    return {"uri": urllib.parse.quote(path, safe="/"), "uriBaseId": "%SRCROOT%"}


def _tool_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("pmap-migrate")
    except metadata.PackageNotFoundError:
        return None


class SarifWriter:
    """One SARIF 2.1.0 run; results carry `fixes` that reproduce the migrated files."""

    def __init__(self) -> None:
        self.rule_index = {code: i for i, code in enumerate(all_rules())}
        self.results: list[dict] = []

    def add(self, result: FileResult) -> None:
        findings = list(result.findings)
        hunks: list[Hunk] = []
        if result.changed and result.migrated != result.original:  # slim results have no text
            hunks = changed_hunks(
                result.original.decode(result.encoding), result.migrated.decode(result.encoding)
            )
        fixes = _assign_hunks(findings, hunks)
        for i, finding in enumerate(findings):
            location = artifact_location(_path(finding, result))
            entry = {
                "ruleId": finding.code,
                "ruleIndex": self.rule_index[finding.code],
                "level": SARIF_LEVELS[finding.severity],
                "message": {"text": finding.message},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": location,
                        "region": {
                            "startLine": max(1, finding.line),
                            "startColumn": max(1, finding.col),
                        },
                    },
                }],
            }
            if i in fixes:
                entry["fixes"] = [{
                    "description": {"text": f"pmap-migrate apply: {rule(finding.code).name}"},
                    "artifactChanges": [{
                        "artifactLocation": dict(location),
                        "replacements": [h.to_sarif() for h in sorted(fixes[i], key=lambda h: h.offset)],
                    }],
                }]
            self.results.append(entry)

    def document(self) -> dict:
        driver: dict = {"name": TOOL_NAME}
        version = _tool_version()
        if version:
            driver["version"] = version
        driver["rules"] = [
            {
                "id": r.code,
                "name": r.name,
                "shortDescription": {"text": r.what},
                "fullDescription": {"text": r.check},
                "help": {"text": r.check},
                "defaultConfiguration": {"level": SARIF_LEVELS[r.severity]},
                "properties": {"fix": r.fix},
            }
            for r in all_rules().values()
        ]
        return {
            "$schema": SARIF_SCHEMA_URI,
            "version": SARIF_VERSION,
            "runs": [{
                "tool": {"driver": driver},
                "columnKind": "unicodeCodePoints",
                "results": self.results,
            }],
        }

    def finish(self, stream: TextIO) -> None:
        json.dump(self.document(), stream, indent=2)  # ASCII only: fits any stream encoding
        stream.write("\n")


# -- GitHub Actions ---------------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF are percent-encoded."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: also `:` and `,`, which delimit properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


class GithubWriter:
    """`::warning file=…,line=…,col=…,title=CODE::message`, one line per finding."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, result: FileResult) -> None:
        for finding in result.findings:
            properties = ",".join(
                f"{key}={escape_property(str(value))}"
                for key, value in (
                    ("file", _path(finding, result)),
                    ("line", max(1, finding.line)),
                    ("col", max(1, finding.col)),
                    ("title", finding.code),
                )
            )
            command = GITHUB_COMMANDS[finding.severity]
            self.lines.append(f"::{command} {properties}::{escape_data(finding.message)}")

    def finish(self, stream: TextIO) -> None:
        stream.writelines(line + "\n" for line in self.lines)


# -- JUnit ------------------------------------------------------------------------------------

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """XML 1.0 cannot carry most control characters (nor lone surrogates): show them escaped."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", text)


@dataclasses.dataclass
class _Case:
    path: str
    errors: list[Finding]
    warnings: list[Finding]
    infos: list[Finding]


def _describe(findings: list[Finding]) -> str:
    """Each finding as `path:line:col: CODE severity message`, then what to check."""
    return "\n".join(f"{f.to_text()}\n    {f.check}" for f in findings)


class JunitWriter:
    """One testcase per file: warnings make a <failure>, errors an <error>, info passes."""

    def __init__(self) -> None:
        self.cases: list[_Case] = []

    def add(self, result: FileResult) -> None:
        by_severity: dict[str, list[Finding]] = {"error": [], "warning": [], "info": []}
        for finding in result.findings:
            by_severity[finding.severity].append(finding)
        self.cases.append(_Case(
            result.file.display.replace("\\", "/"),
            by_severity["error"], by_severity["warning"], by_severity["info"],
        ))

    def element(self) -> ET.Element:
        errors = sum(bool(c.errors) for c in self.cases)
        failures = sum(bool(c.warnings) and not c.errors for c in self.cases)
        suite = ET.Element(
            "testsuite", name=TOOL_NAME, tests=str(len(self.cases)),
            failures=str(failures), errors=str(errors), skipped="0",
        )
        for case in self.cases:
            path = _xml_text(case.path)
            node = ET.SubElement(suite, "testcase", classname=path, name=path)
            problems = case.errors + case.warnings
            if problems:
                counts = [
                    f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"
                    for items, noun in ((case.errors, "error"), (case.warnings, "warning"))
                    if items
                ]
                first = " ".join(problems[0].to_text().split())
                problem = ET.SubElement(
                    node, "error" if case.errors else "failure",
                    message=_xml_text(f"{', '.join(counts)}; first: {first}"),
                    type="error" if case.errors else "warning",
                )
                problem.text = _xml_text(_describe(problems))
            if case.infos:
                ET.SubElement(node, "system-out").text = _xml_text(_describe(case.infos))
        return suite

    def finish(self, stream: TextIO) -> None:
        # us-ascii with character references: the document fits any stream encoding.
        data = ET.tostring(self.element(), encoding="us-ascii", xml_declaration=True)
        stream.write(data.decode("ascii") + "\n")


WRITERS: dict[str, type] = {"sarif": SarifWriter, "github": GithubWriter, "junit": JunitWriter}


# -- --statistics -----------------------------------------------------------------------------


def write_statistics(counts: collections.Counter, stream: TextIO, as_json: bool = False) -> None:
    """One line per code, as ruff's `--statistics` prints them: count, code, `[*]` when the
    tool rewrites such sites, and the rule's name; most frequent first. `as_json`: a list of
    {code, name, count, fixable} objects instead."""
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    fixable = {code: rule(code).fix != "none" for code, _ in rows}
    if as_json:
        entries = [
            {"code": code, "name": rule(code).name, "count": count, "fixable": fixable[code]}
            for code, count in rows
        ]
        json.dump(entries, stream, indent=2)
        stream.write("\n")
        return
    if not rows:
        return
    count_width = max(len(str(count)) for _, count in rows)
    code_width = max(len(code) for code, _ in rows)
    any_fixable = any(fixable.values())
    for code, count in rows:
        mark = ("[*] " if fixable[code] else "[ ] ") if any_fixable else ""
        stream.write(f"{count:>{count_width}}\t{code:<{code_width}}\t{mark}{rule(code).name}\n")
