"""The findings of the global pass: a blocker as a finding, the PM608 of a site that falls
back with its caller, and the PM600 that says how a site went global."""

from __future__ import annotations

from transforms.codes.findings import Finding
from transforms.codes.global_view import FALLS_BACK_WITH_CALLER, SITE, STACKED_VALUE
from transforms.global_view.callers import caller_label, inside
from transforms.global_view.fixpoint import Decision
from transforms.global_view.module_info import ModuleInfo
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


def dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for finding in findings:
        key = (finding.code, finding.line, finding.col, finding.message)
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
                why = f"its call at line {blocker.node.lineno} cannot go global" \
                    if blocker.site == name else "its caller cannot go global"
                findings.append(blocker_finding(Blocker(
                    FALLS_BACK_WITH_CALLER, site.node,
                    f"{site.label} stays faithful: {why} "
                    f"(line {blocker.node.lineno}: {blocker.message})")))
                findings.append(blocker_finding(blocker))
    return findings


def migrated_finding(site: Site, specs, out_specs: str, mode, axis: str, decision: Decision,
                     module: ModuleInfo, multiprocess: bool, vmapped: bool = False) -> Finding:
    """The PM600 of a global site: its specs, its callers and what changed for them.
    `vmapped`: a lambda or a function whose body is not read, over stacked rows, run as
    jax.vmap over each device's block."""
    modes = mode if isinstance(mode, tuple) else (mode,)
    if vmapped:
        kept = "; its body runs under jax.vmap per device"
    elif any(stacked_axis(m) is not None for m in modes):
        kept = ""  # per-device results keep their device axis: out_specs P(axis) says so
    elif MERGED_OUT in modes:
        kept = "; per-device results merged on their leading axis"
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
        kept += "; every process's rows as one global batch"
    callers = ", ".join(caller_label(c) for c in sorted(decision.callers_of(site.key)))
    return Finding(
        SITE, site.node.lineno, site.node.col_offset + 1,
        f"went global: in_specs {tuple_text(specs)}, out_specs {out_specs}; "
        f"{callers} {'pass' if ',' in callers else 'passes'} global arrays{kept}")


def stacked_findings(results) -> list[Finding]:
    """A PM611 for each argument of a global site that keeps pmap's stacked layout, naming
    the value, its line and why it has no global layout."""
    seen = {}
    for result in results.values():
        for node, message in result.stacked:
            seen.setdefault((node.lineno, node.col_offset), message)
    return [Finding(STACKED_VALUE, line, col + 1, message)
            for (line, col), message in sorted(seen.items())]
