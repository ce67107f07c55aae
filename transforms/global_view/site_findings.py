"""The findings of the global pass: a blocker as a finding, the PM608 of a site that falls
back with its caller, the PM600 that says how a site went global and the PM612 of a site that
keeps pmap's calling convention.

A person reads them, so each site gets one finding with a short message (about 120
characters) that names the values and lines to look at; the long explanation of each code is
its rule's doc (transforms/rules.toml, `pmap-migrate explain PMnnn`)."""

from __future__ import annotations

import ast
import collections
import dataclasses

from transforms.codes.findings import Finding
from transforms.codes.global_view import CONTRACT, FALLS_BACK_WITH_CALLER, SITE, STACKED_VALUE
from transforms.global_view.callers import caller_label, inside
from transforms.global_view.fixpoint import Decision
from transforms.global_view.module_info import ModuleInfo
from transforms.global_view.record_specs import spec_words
from transforms.global_view.sites import Blocker, Site
from transforms.global_view.values import (
    MERGED_OUT,
    SCALARS_OUT,
    quoted,
    stacked_axis,
    tuple_text,
)


def blocker_finding(blocker: Blocker) -> Finding:
    node = blocker.node
    return Finding(blocker.code, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1,
                   blocker.message)


def _key(finding: Finding) -> tuple:
    return finding.code, finding.line, finding.col, finding.message


def dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for finding in findings:
        key = _key(finding)
        if key not in seen:
            seen.add(key)
            out.append(finding)
    return out


def fallback_findings(sites: list[Site], blocked: dict[str, Blocker]) -> list[Finding]:
    """Each blocked site's blocker; a site blocked by its caller also gets a PM608 saying so."""
    findings = []
    by_name = {s.key: s for s in sites}
    for name, site in by_name.items():
        if name in blocked:
            blocker = blocked[name]
            if blocker.node is site.node or inside(blocker.node, site.statement):
                findings.append(blocker_finding(blocker))
            else:
                cause = blocker_finding(blocker)
                why = "its call" if blocker.site == name else "its caller"
                pointer = blocker_finding(Blocker(
                    FALLS_BACK_WITH_CALLER, site.node,
                    f"{site.label} stays faithful: {why} cannot go global "
                    f"({blocker.code}, line {blocker.node.lineno})"))  # which says why
                findings.append(dataclasses.replace(pointer, cause=cause))
                findings.append(cause)
    return findings


def migrated_finding(site: Site, specs, out_specs: str, mode, axis: str, decision: Decision,
                     module: ModuleInfo, multiprocess: bool, vmapped: bool = False,
                     elsewhere: tuple[str, ...] = ()) -> Finding:
    """The PM600 of a global site: its specs, its callers and what changed for them.
    `vmapped`: a lambda or a function whose body is not read, over stacked rows, run as
    jax.vmap over each device's block. `elsewhere`: the other modules of the run whose calls
    of it were followed and go global with it (cross_module.py)."""
    modes = mode if isinstance(mode, tuple) else (mode,)
    if vmapped:
        kept = "; its body runs under jax.vmap per device"
    elif any(stacked_axis(m) is not None for m in modes):
        kept = ""  # per-device results keep their device axis: out_specs P(axis) says so
    elif MERGED_OUT in modes:
        kept = "; per-device results merged"
    elif SCALARS_OUT in modes:
        kept = "; per-device numbers as (1,) blocks"
    else:
        kept = ""
    if site.holder:
        kept += f"; held by `{site.holder}`"
    own = decision.first_result(site.key)  # the first in results order that calls it
    if own is not None and site.key in module.under_other_mesh:
        mesh = dict((axis, name) for name, axis in own.meshes).get(axis)
        where = f"`{mesh}`" if mesh else f"`{module.mesh_function}({quoted(axis)})`"
        kept += f"; on the caller's mesh as {where}"
    if site.static:
        kept += f"; static_argnums: {', '.join(site.params[i] for i in site.static)}"
    if multiprocess:
        kept += "; processes' rows joined"
    names = _callers_text(decision.callers_of(site.key), elsewhere)
    callers = ", ".join(names)
    verb = "passes" if len(names) == 1 and not names[0].startswith("those ") else "pass"
    mapped = [p for i, p in enumerate(site.params) if i not in site.static]
    specs, out_specs = spec_words(specs, out_specs, mapped, quoted(axis))
    return Finding(
        SITE, site.node.lineno, site.node.col_offset + 1,
        f"went global: in_specs {tuple_text(specs)}, out_specs {out_specs}; "
        f"{callers} {verb} global arrays{kept}")


def _callers_text(here, elsewhere: tuple[str, ...]) -> list[str]:
    return [*(caller_label(c) for c in sorted(here)), *(f"those in {m}" for m in elsewhere)]


def stacked_findings(results) -> list[Finding]:
    """A PM611 for each argument of a global site that keeps pmap's stacked layout, naming
    the value, its line and why it has no global layout."""
    seen = {}
    for result in results.values():
        for node, message in result.stacked:
            seen.setdefault((node.lineno, node.col_offset), message)
    return [Finding(STACKED_VALUE, line, col + 1, message)
            for (line, col), message in sorted(seen.items())]


# Endings of blocker messages written for a site that stays faithful: a site that keeps pmap's
# calling convention says what was done itself.
_VERDICTS = (": kept in the faithful style", "; kept in the faithful style",
             ", kept in the faithful style", ": kept with pmap's calling contract",
             ": kept with pmap's calling convention", "; kept with pmap's calling convention")


def short_reason(message: str) -> str:
    """A blocker's message as the reason a site's finding gives: without the verdict it ends
    with, which the site's own finding states."""
    for verdict in _VERDICTS:
        at = message.find(verdict)
        if at > 0:
            message = message[:at]
    return message


def contract_findings(contracts: list[tuple[ast.AST, range]],
                      folded: dict[int, list[Finding]], kept: list[Finding]) -> list[Finding]:
    """The one PM612 of each site that keeps pmap's calling convention: what was done and its
    first blocker, with the blocker's code and, on another line, its line. `contracts`: each
    site's pmap node and the lines it spans; `folded`: the fallback findings on those lines
    (by id of the node), which this finding replaces; `kept`: the module's other findings,
    from which a blocker on another line that only this site names is removed (its reason is
    in this finding). A blocker several sites share stays once, at its line, and each site
    names it by code and line."""
    first = {}
    for node, lines in contracts:
        reasons = folded.get(id(node), [])
        if reasons:
            first[id(node)] = reasons[0].cause or reasons[0]
    named = collections.Counter(_key(b) for b in first.values())
    pointed = {_key(f.cause) for f in kept if f.cause is not None}  # by a site left faithful
    alone = {key for key, n in named.items() if n == 1 and key not in pointed}
    out = []
    for node, lines in contracts:
        blocker = first.get(id(node))
        if blocker is None:
            why = "its callers are not in this module, so their layouts are unknown"
        elif blocker.line in lines:  # its own: an option, its shape, a decorator above it
            where = "" if blocker.line == node.lineno else f", line {blocker.line}"
            why = f"{short_reason(blocker.message)} ({blocker.code}{where})"
        elif _key(blocker) in alone:  # its call, or a caller: printed here only
            lead = "with its caller: " \
                if "its caller " in folded[id(node)][0].message else ""
            why = f"{lead}{short_reason(blocker.message)} ({blocker.code}, line {blocker.line})"
        else:
            why = f"a blocker it shares with other sites ({blocker.code}, line {blocker.line})"
        out.append(Finding(CONTRACT, node.lineno, node.col_offset + 1,
                           f"kept pmap's calling convention: {why}"))
    return [f for f in kept if _key(f) not in alone] + out
