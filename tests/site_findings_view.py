"""A site that keeps pmap's calling convention gets one finding, PM612, which names its first
blocker inside: `kept pmap's calling convention: <reason> (PM604, line 268)`. Tests that ask
which blocker kept a site from going global read it through `with_named_blockers`, as they
read the blocker's own finding before the two were one."""

from __future__ import annotations

import dataclasses
import re

from transforms.codes.findings import Finding

LEAD = "kept pmap's calling convention: "
# The blocker a PM612 names at its end: its code, and its line where it is on another line.
NAMED = re.compile(r" \((PM6\d\d)(?:, (?:cell \d+, )?line (\d+))?\)$")


def named_blocker(finding: Finding) -> Finding | None:
    """The blocker a PM612 names, as a finding of its own: its code, its line (the site's
    where the message gives none) and the reason the PM612 gives; None for any other finding
    and for a PM612 that names none."""
    if finding.code != "PM612" or not finding.message.startswith(LEAD):
        return None
    found = NAMED.search(finding.message)
    if found is None:
        return None
    reason = finding.message[len(LEAD):found.start()]
    line = int(found.group(2)) if found.group(2) else finding.line
    return dataclasses.replace(finding, code=found.group(1), line=line, message=reason)


def with_named_blockers(findings) -> list[Finding]:
    """The findings, each PM612 followed by the blocker it names."""
    out = []
    for finding in findings:
        out.append(finding)
        blocker = named_blocker(finding)
        if blocker is not None:
            out.append(blocker)
    return out


def migrated_with_named_blockers(result):
    """A migration result (transforms.pipeline.MigrationResult) whose findings are read with
    `with_named_blockers`."""
    return dataclasses.replace(result, findings=with_named_blockers(result.findings))
