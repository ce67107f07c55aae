"""The equivalence check: run each entry, original and migrated, at each device count, and
compare outputs, collectives, donation and output sharding.

Verdicts per entry and device count:
- "equivalent": every section agrees;
- "different": a section differs, or the migrated side fails or times out while the original runs;
- "stalled": XLA:CPU's collective rendezvous stalled on a side (the runtime said so, see
  equivalence.runner.RENDEZVOUS_STALL): a harness stall, which says nothing about the program;
- "error": the check could not be made (the original itself fails or times out).
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from pathlib import Path

from equivalence.compare import compare_outputs
from equivalence.runner import RunOutcome, run_entry, worker_threads

EQUIVALENT, DIFFERENT, STALLED, ERROR = "equivalent", "different", "stalled", "error"
VERDICTS = (EQUIVALENT, DIFFERENT, STALLED, ERROR)


@dataclasses.dataclass
class Section:
    verdict: str  # equivalent | different | skipped
    differences: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    details: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class EntryReport:
    entry: str
    devices: int
    verdict: str
    seconds: float
    original: dict
    migrated: dict
    sections: dict[str, Section]
    process: int = 0  # with --processes P > 1: which process of the job this compares
    processes: int = 1

    @property
    def where(self) -> str:
        """`[8 devices]`, or `[8 devices, process 1 of 2]`."""
        process = f", process {self.process} of {self.processes}" if self.processes > 1 else ""
        return f"[{self.devices} devices{process}]"

    @property
    def label(self) -> str:
        return f"{self.entry}{self.where}"

    @property
    def differences(self) -> list[str]:
        found = [f"{name}: {d}" for name, s in self.sections.items() for d in s.differences]
        for side in ("original", "migrated"):
            outcome = getattr(self, side)
            if outcome.get("error") and not outcome.get("stall"):
                found.insert(0, f"{side} failed: {outcome['error']}")
        return found

    @property
    def stalls(self) -> list[str]:
        """Sides whose run stalled in XLA:CPU's collective rendezvous, in the runtime's words."""
        return [f"{side} stalled in XLA:CPU's collective rendezvous: {getattr(self, side)['stall']}"
                for side in ("original", "migrated") if getattr(self, side).get("stall")]

    def to_dict(self) -> dict:
        return {
            "entry": self.entry,
            "devices": self.devices,
            **({"process": self.process, "processes": self.processes}
               if self.processes > 1 else {}),
            "verdict": self.verdict,
            "seconds": round(self.seconds, 3),
            "original": self.original,
            "migrated": self.migrated,
            **{name: dataclasses.asdict(section) for name, section in self.sections.items()},
        }


@dataclasses.dataclass
class CheckOptions:
    devices: tuple[int, ...] = (8,)
    reference_python: str = sys.executable  # runs the original
    python: str = sys.executable  # runs the migrated code
    timeout: float = 300.0
    jobs: int = 2
    rng_compat: bool = True  # see equivalence.runner: same random streams on old and new JAX
    processes: int = 1  # > 1: each side runs as a jax.distributed job (equivalence.multiprocess)
    # --style global: entry -> output layouts (equivalence.layouts); None compares as is.
    layouts: dict | None = None


def check(original_root: Path, migrated_root: Path, entries: list[str], options: CheckOptions):
    """Yield an EntryReport per (entry, device count), in order, running sides in parallel."""
    same_jax = options.reference_python == options.python
    if options.processes > 1:
        yield from _check_processes(original_root, migrated_root, entries, options, same_jax)
        return
    with worker_threads(max(1, options.jobs)) as pool:
        for entry in entries:
            for devices in options.devices:
                start = time.perf_counter()
                original = pool.submit(
                    run_entry, original_root, entry, devices=devices,
                    python=options.reference_python, timeout=options.timeout,
                    rng_compat=options.rng_compat,
                )
                migrated = pool.submit(
                    run_entry, migrated_root, entry, devices=devices,
                    python=options.python, timeout=options.timeout,
                    rng_compat=options.rng_compat,
                )
                yield compare_runs(
                    entry, devices, original.result(), migrated.result(),
                    same_jax=same_jax, seconds=time.perf_counter() - start,
                    layouts=None if options.layouts is None else options.layouts.get(entry, ()),
                )


def _check_processes(original_root, migrated_root, entries, options, same_jax):
    """Each side as `options.processes` processes; one EntryReport per process."""
    from equivalence.multiprocess import run_entry_processes

    with worker_threads(2) as pool:
        yield from _each_process_report(pool, original_root, migrated_root, entries, options,
                                        same_jax, run_entry_processes)


def _each_process_report(pool, original_root, migrated_root, entries, options, same_jax,
                         run_entry_processes):
    """The reports of _check_processes, side by side in `pool`."""
    for entry in entries:
        for devices in options.devices:
            start = time.perf_counter()
            runs = [
                pool.submit(
                    run_entry_processes, root, entry, devices=devices,
                    processes=options.processes, python=python, timeout=options.timeout,
                    rng_compat=options.rng_compat,
                )
                for root, python in ((original_root, options.reference_python),
                                     (migrated_root, options.python))
            ]
            original, migrated = (run.result() for run in runs)
            seconds = time.perf_counter() - start
            # --style global: a process's host-local rows in the original against what
            # the migrated program returns in that process, through the same layout map.
            layouts = None if options.layouts is None else options.layouts.get(entry, ())
            for process, (before, after) in enumerate(zip(original, migrated)):
                report = compare_runs(entry, devices, before, after, same_jax=same_jax,
                                      seconds=seconds, layouts=layouts)
                report.process, report.processes = process, options.processes
                yield report


def compare_runs(
    entry: str, devices: int, original: RunOutcome, migrated: RunOutcome, *, same_jax: bool,
    seconds: float = 0.0, layouts=None,
) -> EntryReport:
    """`layouts`: with --style global, the entry's output layouts (possibly empty)."""
    sides = {"original": _side(original), "migrated": _side(migrated)}
    if not original.ok:
        # A stalled original proves nothing either way; any other failure is the original's own.
        verdict = STALLED if original.stall else ERROR
        return EntryReport(entry, devices, verdict, seconds, **sides, sections={})
    if not migrated.ok:
        verdict = STALLED if migrated.stall else DIFFERENT
        return EntryReport(entry, devices, verdict, seconds, **sides, sections={})
    layout_section = None
    if layouts is not None:
        original, layout_section = _through_layouts(original, layouts)
    sections = {
        "outputs": _outputs(original, migrated),
        "collectives": _collectives(original, migrated, same_jax),
        "donation": _donation(original, migrated),
        "sharding": _sharding(original, migrated),
    }
    if layout_section is not None:
        sections["layout"] = layout_section
    verdict = DIFFERENT if any(s.verdict == DIFFERENT for s in sections.values()) else EQUIVALENT
    return EntryReport(entry, devices, verdict, seconds, **sides, sections=sections)


def _through_layouts(original: RunOutcome, layouts) -> tuple[RunOutcome, Section]:
    """The original's outputs in the migrated layout, and what that took (--style global)."""
    from equivalence.layouts import to_migrated_layout

    output, problems, done = to_migrated_layout(original.output, layouts)
    section = Section(_verdict([str(p) for p in problems]), [str(p) for p in problems], done,
                      details={"layouts": [layout.to_dict() for layout in layouts]})
    return dataclasses.replace(original, output=output), section


def _side(outcome: RunOutcome) -> dict:
    return {"ok": outcome.ok, "seconds": round(outcome.seconds, 3),
            "jax_version": outcome.jax_version, "error": outcome.error, "stall": outcome.stall}


def _verdict(differences: list[str]) -> str:
    return DIFFERENT if differences else EQUIVALENT


def _outputs(original: RunOutcome, migrated: RunOutcome) -> Section:
    differences = [str(d) for d in compare_outputs(original.output, migrated.output)]
    leaves = len(original.output["leaves"])
    return Section(_verdict(differences), differences, details={"leaves": leaves})


def _collectives(original: RunOutcome, migrated: RunOutcome, same_jax: bool) -> Section:
    """Same JAX and the same lowering on both sides: counts must match exactly. Across JAX
    versions, or between the legacy pmap's replica lowering and jit + shard_map (XLA merges
    identical replica collectives but, before JAX 0.5, not channel ones), XLA combines and
    folds collectives differently, so only the kinds and device groups must match and count
    changes are notes."""
    exact = same_jax and original.compiled.replica_lowered == migrated.compiled.replica_lowered
    why = "different JAX versions" if not same_jax else "legacy pmap vs jit lowering"
    before = original.compiled.program_collectives()
    after = migrated.compiled.program_collectives()
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


def _donation(original: RunOutcome, migrated: RunOutcome) -> Section:
    before, after = original.compiled.donations(), migrated.compiled.donations()
    differences = []
    if before != after:
        differences.append(
            f"aliased (donated) parameters per program: original {before}, migrated {after}"
        )
    return Section(_verdict(differences), differences, details={"original": before, "migrated": after})


def _sharding(original: RunOutcome, migrated: RunOutcome) -> Section:
    differences, compared = [], 0
    for a, b in zip(original.output["leaves"], migrated.output["leaves"]):
        if "sharding" in a and "sharding" in b:
            compared += 1
            if a["sharding"] != b["sharding"]:
                differences.append(f"{a['path']}: {a['sharding']} != {b['sharding']}")
    verdict = _verdict(differences) if compared else "skipped"
    return Section(verdict, differences, details={"compared_leaves": compared})


def summary(reports: list[EntryReport]) -> dict:
    verdicts = collections.Counter(r.verdict for r in reports)
    return {"checks": len(reports), **{v: verdicts.get(v, 0) for v in VERDICTS}}


def exit_code(reports: list[EntryReport]) -> int:
    """2 when some check could not be made (a broken original, or a harness stall), else 1 on
    any difference, else 0."""
    counts = summary(reports)
    if counts[ERROR] or counts[STALLED]:
        return 2
    return 1 if counts[DIFFERENT] else 0
