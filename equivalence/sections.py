"""What a pair of runs (original, migrated) is compared on, one `Section` each: outputs
(through the migration's layout map with --style global), collectives, donation and output
sharding. equivalence/check.py turns the sections into a verdict."""

from __future__ import annotations

import dataclasses

from equivalence.compare import compare_outputs
from equivalence.hlo import placed_modules
from equivalence.runner import RunOutcome

EQUIVALENT, DIFFERENT = "equivalent", "different"


@dataclasses.dataclass
class Section:
    verdict: str  # equivalent | different | skipped
    differences: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    details: dict = dataclasses.field(default_factory=dict)


def through_layouts(original: RunOutcome, layouts) -> tuple[RunOutcome, Section]:
    """The original's outputs in the migrated layout, and what that took (--style global)."""
    from equivalence.layouts import to_migrated_layout

    output, problems, done = to_migrated_layout(original.output, layouts)
    section = Section(_verdict([str(p) for p in problems]), [str(p) for p in problems], done,
                      details={"layouts": [layout.to_dict() for layout in layouts]})
    return dataclasses.replace(original, output=output), section


def side_summary(outcome: RunOutcome) -> dict:
    return {"ok": outcome.ok, "seconds": round(outcome.seconds, 3),
            "jax_version": outcome.jax_version, "error": outcome.error, "stall": outcome.stall}


def _verdict(differences: list[str]) -> str:
    return DIFFERENT if differences else EQUIVALENT


def outputs_section(original: RunOutcome, migrated: RunOutcome) -> Section:
    found = compare_outputs(original.output, migrated.output)
    leaves = len(original.output["leaves"])
    # "values": per differing leaf, expected (original) and got (migrated) at the first
    # differing positions, the max abs / rel difference and the tolerance (compare.py).
    return Section(_verdict(found), [str(d) for d in found],
                   details={"leaves": leaves, "values": [d.to_dict() for d in found]})


def collectives_section(original: RunOutcome, migrated: RunOutcome, same_jax: bool) -> Section:
    """Same JAX and the same lowering on both sides: counts must match exactly. Across JAX
    versions, or between the legacy pmap's replica lowering and jit + shard_map (XLA merges
    identical replica collectives but, before JAX 0.5, not channel ones), XLA combines and
    folds collectives differently, so only the kinds and device groups must match and count
    changes are notes. Collectives that come from where the data lives rather than from the
    program are notes too (equivalence.hlo): the all-reduces of a legacy jit-of-pmap
    assembling its outputs, and those XLA's partitioner adds to a jitted function the
    original compiled without any."""
    exact = same_jax and original.compiled.replica_lowered == migrated.compiled.replica_lowered
    why = "different JAX versions" if not same_jax else "legacy pmap vs jit lowering"
    placed = placed_modules(original.compiled, migrated.compiled)
    before = original.compiled.program_collectives()
    after = migrated.compiled.program_collectives(placed)
    differences, notes = [], []
    for label in sorted(set(before) | set(after)):
        old, new = before.get(label, 0), after.get(label, 0)
        if old == new:
            continue
        if not old or not new:
            differences.append(f"{label}: {'added' if not old else 'removed'} ({old} -> {new} operands)")
        elif exact:
            differences.append(f"{label}: {old} -> {new} operands")
        else:
            notes.append(f"{label}: {old} -> {new} operands ({why}; kinds match)")
    assembly = (original.compiled.jit_of_pmap_assembly()
                - migrated.compiled.jit_of_pmap_assembly())
    for label, count in sorted(assembly.items()):
        notes.append(
            f"the original's jit-of-pmap assembles its outputs: {label} x{count} (jax < 0.5 "
            "runs a pmap inside jit on every device and sums each device's rows into the whole "
            "output, replicated on all; the migrated jit + shard_map leaves it sharded)"
        )
    placement = migrated.compiled.placement_collectives(placed)
    for label, count in sorted(placement.items()):
        notes.append(
            f"collectives XLA added to jitted functions the original compiled without any "
            f"({', '.join(sorted(placed))}): {label} x{count} (their inputs now arrive sharded, "
            "so XLA splits their work over the devices; the function itself communicates "
            "nothing)"
        )
    extra = migrated.compiled.data_movement_collectives() - original.compiled.data_movement_collectives()
    for label, count in sorted(extra.items()):
        notes.append(
            f"extra data movement in the migrated run: {label} x{count} in eager operations "
            "(e.g. x[0] on a sharded output compiles a gather; prefer out_axes=None or "
            "x.addressable_shards[0].data)"
        )
    extra = (migrated.compiled.eager_reduction_collectives()
             - original.compiled.eager_reduction_collectives())
    for label, count in sorted(extra.items()):
        notes.append(
            f"extra collectives in eager reductions of the migrated run: {label} x{count} (a "
            "reduction of a value spread over devices, e.g. np.mean(x), which calls x.mean(), "
            "runs on all of them; np.mean(np.asarray(x)) reduces on the host)"
        )
    details = {"original": original.compiled.to_dict(), "migrated": migrated.compiled.to_dict()}
    return Section(_verdict(differences), differences, notes, details)


def donation_section(original: RunOutcome, migrated: RunOutcome) -> Section:
    before, after = original.compiled.donations(), migrated.compiled.donations()
    differences = []
    if before != after:
        differences.append(
            f"aliased (donated) parameters per program: original {before}, migrated {after}"
        )
    return Section(_verdict(differences), differences, details={"original": before, "migrated": after})


def sharding_section(original: RunOutcome, migrated: RunOutcome) -> Section:
    differences, compared = [], 0
    for a, b in zip(original.output["leaves"], migrated.output["leaves"]):
        if "sharding" in a and "sharding" in b:
            compared += 1
            if a["sharding"] != b["sharding"]:
                differences.append(f"{a['path']}: {a['sharding']} != {b['sharding']}")
    verdict = _verdict(differences) if compared else "skipped"
    return Section(verdict, differences, details={"compared_leaves": compared})
